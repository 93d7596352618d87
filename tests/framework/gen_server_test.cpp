#include <smarm/gen_server.hpp>
#include <smarm/monitor.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
using steady = smarm_test::steady;

namespace {

// call: add n (n < 0: throw; n == 1000: sleep 200 ms first), reply the total.
// cast: add. info: stop.
struct counter : smarm::gen_server<int, int, int, std::string> {
    int total = 0;
    std::atomic<int>* terminated = nullptr;
    explicit counter(std::atomic<int>* t = nullptr) : terminated(t) {}
    int handle_call(int n) override {
        if (n < 0) throw std::runtime_error("negative");
        if (n == 1000) smarm::sleep(200ms);
        return total += n;
    }
    void handle_cast(int n) override { total += n; }
    void handle_info(std::string s) override {
        if (s == "stop") stop();
    }
    void terminate(smarm::exit_kind) override {
        if (terminated) terminated->fetch_add(1);
    }
};

TEST(GenServer, CallCastInfoAndTerminate) {
    std::atomic<int> terminated{0};
    smarm_test::run([&] {
        auto ref = smarm::start<counter>(&terminated);
        auto r = smarm::call(ref, 5, 1s);
        ASSERT_TRUE(r);
        EXPECT_EQ(*r.value, 5);
        EXPECT_TRUE(smarm::cast(ref, 2));
        EXPECT_EQ(*smarm::call(ref, 0, 1s).value, 7) << "the cast was served in order";
        auto m = smarm::monitor(ref.id);
        EXPECT_TRUE(smarm::send_info(ref, std::string("stop")));
        EXPECT_EQ(m.rx.recv()->reason, smarm::down_reason::exit);
        auto after = smarm::call(ref, 1, 1s);
        EXPECT_EQ(after.error, smarm::call_error::server_down);
    });
    EXPECT_EQ(terminated.load(), 1);
}

// Manual clock: the call times out at exactly 20 ms, not a moment before.
SMARM_TEST_CLOCK(GenServer, CallTimeout) {
    auto ref = smarm::start<counter>();
    auto [tx, rx] = smarm::channel<smarm::call_error>();
    const auto t0 = clock.now();
    auto caller = smarm::spawn([&, tx = tx] {
        auto r = smarm::call(ref, 1000, 20ms);  // the server sleeps 200 ms on 1000
        EXPECT_EQ(clock.now() - t0, 20ms);
        (void)tx.send(r.error.value_or(smarm::call_error::server_down));
    });
    smarm_test::await_parked(caller.id());
    clock.advance(19ms);
    smarm_test::await_parked(caller.id());
    EXPECT_FALSE(rx.try_recv());
    clock.advance(1ms);
    EXPECT_EQ(*rx.recv(), smarm::call_error::timeout);
    caller.join();
    clock.advance(180ms);  // the server's sleep ends
    EXPECT_TRUE(smarm::call(ref, 1, 5s)) << "the server lives on";
    smarm::request_stop(ref.id);
}

SMARM_TEST(GenServer, NamedServerResolvesWhenStartReturns) {
    constexpr smarm::name<counter::envelope> name{"counter_server"};
    auto ref = smarm::start_named<counter>(name);
    EXPECT_EQ(smarm::whereis(name), ref.id);
    auto r = smarm::call<counter>(name, 3, 1s);
    ASSERT_TRUE(r);
    EXPECT_EQ(*r.value, 3);
    EXPECT_THROW(smarm::start_named<counter>(name), std::runtime_error);
    smarm::request_stop(ref.id);
}

// Seed test stop_with_queued_call: a named server busy in a long call is
// stopped while another call sits queued; the queued caller is released
// with server_down well within 3 s.
SMARM_TEST(GenServer, StopWithQueuedCall) {
    constexpr smarm::name<counter::envelope> name{"busy_server"};
    auto ref = smarm::start_named<counter>(name);
    auto busy = smarm::spawn([&] { (void)smarm::call<counter>(name, 1000, 10s); });
    smarm::sleep(5ms);
    auto t0 = steady::now();
    auto queued = smarm::spawn([&] {
        auto r = smarm::call<counter>(name, 1, 10s);
        EXPECT_EQ(r.error, smarm::call_error::server_down);
    });
    smarm::sleep(5ms);
    smarm::request_stop(ref.id);
    queued.join();
    busy.join();
    EXPECT_LT(steady::now() - t0, 3s);
    EXPECT_EQ(smarm::call<counter>(name, 1, 1s).error, smarm::call_error::server_down);
}

SMARM_TEST(GenServer, HandlerExceptionTurnsCallersIntoServerDown) {
    auto ref = smarm::start<counter>();
    auto m = smarm::monitor(ref.id);
    EXPECT_EQ(smarm::call(ref, -1, 1s).error, smarm::call_error::server_down);
    EXPECT_EQ(m.rx.recv()->reason, smarm::down_reason::panic);
}

struct ticker : smarm::gen_server<int, std::vector<std::uint64_t>> {
    std::vector<std::uint64_t> fired;
    ticker() {
        arm_after(5ms, 1);
        arm_every(2ms, 2);
        arm_after(10ms, 3);
        cancel(3);
    }
    std::vector<std::uint64_t> handle_call(int) override { return fired; }
    void handle_timer(std::uint64_t tag) override {
        fired.push_back(tag);
        if (tag == 2 && std::count(fired.begin(), fired.end(), 2) == 3) cancel(2);
    }
};

SMARM_TEST(GenServer, TimersAfterEveryAndCancel) {
    auto ref = smarm::start<ticker>();
    // Wait (generously) until the expected fires happened, then a bit
    // longer to see that nothing else fires.
    auto t0 = steady::now();
    for (;;) {
        auto r = smarm::call(ref, 0, 5s);
        ASSERT_TRUE(r);
        auto& f = *r.value;
        if (std::count(f.begin(), f.end(), 1u) == 1 && std::count(f.begin(), f.end(), 2u) >= 3)
            break;
        ASSERT_LT(steady::now() - t0, 10s) << "timers never fired";
        smarm::sleep(2ms);
    }
    smarm::sleep(20ms);
    auto r = smarm::call(ref, 0, 5s);
    ASSERT_TRUE(r);
    auto& f = *r.value;
    EXPECT_EQ(std::count(f.begin(), f.end(), 1u), 1);
    EXPECT_EQ(std::count(f.begin(), f.end(), 2u), 3) << "every, until cancelled";
    EXPECT_EQ(std::count(f.begin(), f.end(), 3u), 0) << "cancelled before firing";
    smarm::request_stop(ref.id);
}

}  // namespace

namespace {

// Calls are answered later: the server holds them until it has three, then
// answers each with its value * 10 + how many were held.
struct batcher : smarm::gen_server<int, int, int> {
    std::vector<std::pair<smarm::reply_to<int>, int>> waiting;
    int handle_call(int n) override {
        waiting.emplace_back(defer_reply(), n * 10);
        if (waiting.size() == 3) {
            for (auto& [to, v] : waiting)
                (void)to.send(v + 3);
            waiting.clear();
        }
        return -1;  // discarded
    }
};

SMARM_TEST(GenServer, DeferredRepliesAreSentLater) {
    auto ref = smarm::start<batcher>();
    std::vector<int> got(3, 0);
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 3; ++i)
        hs.push_back(smarm::spawn([&, i] { got[i] = *smarm::call(ref, i + 1, 10s).value; }));
    for (auto& h : hs)
        h.join();
    EXPECT_EQ(got, (std::vector<int>{13, 23, 33})) << "each answered once all three were held";
    // Dropping a held reply releases its caller.
    smarm::call_result<int> r;
    auto h = smarm::spawn([&] { r = smarm::call(ref, 5, 10s); });
    auto m = smarm::monitor(ref.id);
    smarm::request_stop(ref.id);
    (void)m.rx.recv();
    h.join();
    EXPECT_EQ(r.error, smarm::call_error::server_down);
}

TEST(GenServer, DeferReplyOutsideACallIsAnError) {
    struct bad : smarm::gen_server<int, int, int> {
        int handle_call(int n) override { return n; }
        void handle_cast(int) override { EXPECT_THROW((void)defer_reply(), std::logic_error); }
    };
    smarm_test::run([] {
        auto ref = smarm::start<bad>();
        EXPECT_TRUE(smarm::cast(ref, 1));
        EXPECT_EQ(*smarm::call(ref, 2, 10s).value, 2);
        smarm::request_stop(ref.id);
    });
}

// A timer that fired while the server was busy, then was cancelled and its
// tag re-armed: the queued fire belongs to the old timer and must not be
// taken for the new one (which is 10 s away).
struct rearmer : smarm::gen_server<int, int> {
    int fired = 0;
    int handle_call(int n) override {
        if (n == 1) {
            arm_after(1ms, 7);
            smarm::sleep(50ms);  // the 1 ms timer fires into the queue meanwhile
            cancel(7);
            arm_after(10s, 7);
        }
        return fired;
    }
    void handle_timer(std::uint64_t) override { ++fired; }
};

SMARM_TEST(GenServer, AFireQueuedBeforeCancelIsNotTakenForTheRearmedTimer) {
    auto ref = smarm::start<rearmer>();
    EXPECT_EQ(*smarm::call(ref, 1, 5s).value, 0);
    // The server's loop has taken the queued fire by now.
    EXPECT_EQ(*smarm::call(ref, 0, 5s).value, 0) << "the re-armed 10 s timer fired early";
    smarm::request_stop(ref.id);
}

// Calls answered through handles held across calls: n == 0 holds the call,
// n == 1 holds it too and first answers the previously held one (which may
// belong to a call that already timed out), cast k answers the held call.
struct holder : smarm::gen_server<int, int, int> {
    smarm::reply_to<int> held;
    std::vector<bool>* sent = nullptr;
    explicit holder(std::vector<bool>* s) : sent(s) {}
    int handle_call(int n) override {
        if (n > 1) return n;
        auto previous = std::move(held);
        held = defer_reply();
        if (n == 1) sent->push_back(previous.send(111));
        return -1;
    }
    void handle_cast(int k) override { sent->push_back(held.send(k)); }
};

TEST(GenServer, ALateReplyNeverReachesALaterCall) {
    std::vector<bool> sent;
    smarm_test::run([&] {
        auto ref = smarm::start<holder>(&sent);
        // The first call times out while the server holds its handle.
        EXPECT_EQ(smarm::call(ref, 0, 20ms).error, smarm::call_error::timeout);
        // The same actor calls again: the server answers the stale handle
        // first (to no one), then this call's own.
        smarm::call_result<int> r;
        auto h = smarm::spawn([&] { r = smarm::call(ref, 1, 5s); });
        EXPECT_EQ(*smarm::call(ref, 7, 5s).value, 7) << "the server is not stuck";
        EXPECT_TRUE(smarm::cast(ref, 222));
        h.join();
        ASSERT_TRUE(r);
        EXPECT_EQ(*r.value, 222);
        // And on the very same caller: a stale handle answered while a newer
        // call from that actor waits.
        EXPECT_EQ(smarm::call(ref, 0, 20ms).error, smarm::call_error::timeout);
        auto late = smarm::spawn([&] {
            smarm::sleep(5ms);
            EXPECT_TRUE(smarm::cast(ref, 333));  // answers the timed-out call
            smarm::sleep(5ms);
            EXPECT_TRUE(smarm::cast(ref, 444));
        });
        // The held handle is replaced by this call's only once it is queued
        // behind nothing: call 1 answers the stale one with 111 (false).
        auto mine = smarm::call(ref, 1, 5s);
        late.join();
        ASSERT_TRUE(mine);
        EXPECT_NE(*mine.value, 111) << "a stale answer reached a later call";
        smarm::request_stop(ref.id);
    });
    // send() results in order: 111 to the timed-out call (no one), 222
    // answered; then 333 either to the stale handle (false) or to ours.
    ASSERT_GE(sent.size(), 3u);
    EXPECT_FALSE(sent[0]) << "answering a timed-out call reports false";
    EXPECT_TRUE(sent[1]) << "answering a waiting call reports true";
}

// Many callers with short timeouts against a server that answers after a
// random pause: every answer a caller receives is the one to its own
// request, never one left over from an earlier (timed-out) call that reused
// the caller's reply cell.
struct echo_later : smarm::gen_server<int, int> {
    unsigned seed = 12345;
    int handle_call(int n) override {
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 16) % 8 == 0) smarm::sleep(std::chrono::microseconds((seed >> 8) % 300));
        return n;
    }
};

TEST(GenServer, StressEveryAnswerBelongsToItsCall) {
    std::atomic<int> answered{0}, timed_out{0}, wrong{0};
    smarm_test::run(
        [&] {
            auto ref = smarm::start<echo_later>();
            std::vector<smarm::join_handle> hs;
            for (int c = 0; c < 8; ++c)
                hs.push_back(smarm::spawn([&, c] {
                    for (int i = 0; i < 300; ++i) {
                        const int req = c * 100000 + i;
                        auto r =
                            smarm::call(ref, req, std::chrono::microseconds(100 + (i % 7) * 300));
                        if (r) {
                            answered.fetch_add(1);
                            if (*r.value != req) wrong.fetch_add(1);
                        } else {
                            EXPECT_EQ(r.error, smarm::call_error::timeout);
                            timed_out.fetch_add(1);
                        }
                    }
                }));
            for (auto& h : hs)
                h.join();
            smarm::request_stop(ref.id);
        },
        4);
    EXPECT_EQ(wrong.load(), 0);
    EXPECT_EQ(answered.load() + timed_out.load(), 8 * 300);
    EXPECT_GT(answered.load(), 0);
    RecordProperty("timed_out", timed_out.load());
}

TEST(GenServer, CallWithoutATimeoutLeavesNoTimerBehind) {
    // An unbounded call arms no timer, so once the root is gone and the
    // caller waits on a server that will never answer, the root drain stops
    // both at once instead of waiting for a timer (run() would hang).
    std::vector<bool> sent;
    std::atomic<bool> stopped{false};
    smarm_test::run([&] {
        auto ref = smarm::start<holder>(&sent);
        EXPECT_EQ(*smarm::call(ref, 5, std::chrono::nanoseconds::max()).value, 5);
        smarm::spawn([&, ref] {
            try {
                (void)smarm::call(ref, 0, std::chrono::nanoseconds::max());
            } catch (const smarm::stopped&) {
                stopped = true;
                throw;
            }
        }).detach();
    });
    EXPECT_TRUE(stopped.load());
}

}  // namespace
