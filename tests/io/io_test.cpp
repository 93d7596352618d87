#include <smarm/channel.hpp>
#include <smarm/io.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
using steady = smarm_test::steady;

namespace {

struct pipe_pair {
    int r = -1, w = -1;
    pipe_pair() {
        int fds[2];
        if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
        r = fds[0];
        w = fds[1];
    }
    ~pipe_pair() {
        if (r >= 0) ::close(r);
        if (w >= 0) ::close(w);
    }
    void put(char c = 'x') const { ASSERT_EQ(::write(w, &c, 1), 1); }
};

SMARM_TEST(Io, WaitReadableWakesOnData) {
    pipe_pair p;
    auto writer = smarm::spawn([&] {
        smarm::sleep(5ms);
        p.put();
    });
    EXPECT_TRUE(smarm::wait_readable(p.r, 5s));
    char c;
    EXPECT_EQ(::read(p.r, &c, 1), 1);
    writer.join();
}

SMARM_TEST(Io, WaitTimesOutNeverEarly) {
    pipe_pair p;
    auto t0 = steady::now();
    EXPECT_FALSE(smarm::wait_readable(p.r, 20ms));
    EXPECT_GE(steady::now() - t0, 20ms);
    EXPECT_LT(steady::now() - t0, 5s);
    p.put();
    EXPECT_TRUE(smarm::wait_readable(p.r, 5s)) << "the fd is waitable again after a timeout";
}

SMARM_TEST(Io, StoppedWaiterLeavesTheFdWaitable) {
    pipe_pair p;
    auto h = smarm::spawn([&] { (void)smarm::wait_readable(p.r); });
    smarm::sleep(3ms);
    smarm::request_stop(h.id());
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    p.put();
    EXPECT_TRUE(smarm::wait_readable(p.r, 5s));
}

TEST(Io, RuntimeTerminatesWhenOnlyAStoppedFdWaiterWasLeft) {
    auto t0 = steady::now();
    pipe_pair p;
    smarm_test::run([&] {
        // Root exits at once; the waiter can never be woken by IO (nobody
        // writes): it must not keep the run alive once stopped... but while
        // it waits on IO the root drain must not stop it either, so stop it.
        auto h = smarm::spawn([&] { (void)smarm::wait_readable(p.r); });
        smarm::sleep(2ms);
        smarm::request_stop(h.id());
        h.detach();
    });
    EXPECT_LT(steady::now() - t0, 10s);
}

SMARM_TEST(Io, BadFdIsAnErrorNotACrash) {
    try {
        (void)smarm::wait_readable(987654, 10ms);
        ADD_FAILURE() << "no error for a bad fd";
    } catch (const std::system_error& e) {
        EXPECT_NE(std::string(e.what()).find("987654"), std::string::npos) << e.what();
    }
}

SMARM_TEST(Io, BlockOnIoReturnsValuesAndRethrows) {
    EXPECT_EQ(smarm::block_on_io([] { return 6 * 7; }), 42);
    EXPECT_EQ(smarm::block_on_io([] { return std::string("pool"); }), "pool");
    smarm::block_on_io([] {});
    EXPECT_THROW(smarm::block_on_io([]() -> int { throw std::runtime_error("job"); }),
                 std::runtime_error);
}

SMARM_TEST(Io, ManyConcurrentBlockingJobsAllComplete) {
    std::atomic<int> done{0};
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 200; ++i)
        hs.push_back(smarm::spawn([&, i] {
            int v = smarm::block_on_io([i] {
                usleep(100);
                return i;
            });
            if (v == i) done.fetch_add(1);
        }));
    for (auto& h : hs)
        h.join();
    EXPECT_EQ(done.load(), 200);
}

// A job may use the caller's locals: a stop must not unwind them while it
// runs (the kv server stopped mid-append: use after free, SIGSEGV).
SMARM_TEST(Io, StopDuringBlockingJobWaitsForTheJobThenStops) {
    std::atomic<bool> started{false}, finished{false}, finished_at_unwind{false};
    std::atomic<int> after{0};
    auto h = smarm::spawn([&] {
        struct witness {
            std::atomic<bool>& finished;
            std::atomic<bool>& seen;
            ~witness() { seen = finished.load(); }
        } w{finished, finished_at_unwind};
        int local = 0;
        smarm::block_on_io([&] {
            started = true;
            usleep(50'000);
            local = 42;  // the caller's frame must still be there
            finished = true;
        });
        after = local;  // not reached: the stop is thrown first
    });
    while (!started.load())
        smarm::sleep(1ms);
    smarm::request_stop(h.id());
    EXPECT_EQ(h.join().kind, smarm::exit_kind::stopped);
    EXPECT_TRUE(finished_at_unwind.load()) << "the actor unwound while its job ran";
    EXPECT_EQ(after.load(), 0) << "the stop was not delivered after the job";
}

SMARM_TEST(Io, SelectChannelAndFdArms) {
    pipe_pair p;
    auto [tx, rx] = smarm::channel<int>();
    {
        smarm::fd_arm fd(p.r, smarm::io_dir::read);
        // fd wins
        auto w = smarm::spawn([&] {
            smarm::sleep(3ms);
            p.put();
        });
        EXPECT_EQ(smarm::select({rx, fd}), 1u);
        w.join();
        char c;
        ASSERT_EQ(::read(p.r, &c, 1), 1);
    }
    {
        smarm::fd_arm fd(p.r, smarm::io_dir::read);
        // channel wins; the losing fd arm leaves no registration behind
        (void)tx.send(5);
        EXPECT_EQ(smarm::select({rx, fd}), 0u);
        EXPECT_EQ(*rx.try_recv().value, 5);
        // timeout
        EXPECT_FALSE(smarm::select_timeout({rx, fd}, 10ms).has_value());
    }
    p.put();
    EXPECT_TRUE(smarm::wait_readable(p.r, 5s)) << "fd waitable after losing/timed-out arms";
}

SMARM_TEST(Io, TwoWaitersSameDirectionIsAnError) {
    pipe_pair p;
    auto first = smarm::spawn([&] { (void)smarm::wait_readable(p.r, 5s); });
    smarm::sleep(2ms);
    auto second = smarm::spawn([&] { (void)smarm::wait_readable(p.r, 5s); });
    auto o = second.join();
    EXPECT_EQ(o.kind, smarm::exit_kind::panic) << "expected a clear error";
    p.put();
    first.join();
}

}  // namespace
