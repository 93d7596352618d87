#include <smarm/channel.hpp>
#include <smarm/introspect.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
using steady = smarm_test::steady;

namespace {

SMARM_TEST(Channel, FifoAndCloseAfterDrain) {
    auto [tx, rx] = smarm::channel<int>();
    auto h = smarm::spawn([tx = std::move(tx)] {
        for (int i = 0; i < 1000; ++i)
            ASSERT_TRUE(tx.send(i).ok());
    });
    for (int i = 0; i < 1000; ++i) {
        auto v = rx.recv();
        ASSERT_TRUE(v.has_value());
        EXPECT_EQ(*v, i);
    }
    h.join();
    EXPECT_FALSE(rx.recv().has_value()) << "closed and drained";
    EXPECT_EQ(rx.try_recv().status, smarm::recv_status::closed);
}

TEST(Channel, SendToDroppedReceiverHandsTheMessageBack) {
    auto [tx, rx] = smarm::channel<std::string>();
    { auto gone = std::move(rx); }
    auto r = tx.send("hello");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(*r.returned, "hello");
    EXPECT_FALSE(tx.connected());
}

TEST(Channel, ReceiverDestructionReleasesQueuedValuesAtOnce) {
    auto [tx, rx] = smarm::channel<std::shared_ptr<int>>();
    auto v = std::make_shared<int>(1);
    for (int i = 0; i < 5; ++i)
        ASSERT_TRUE(tx.send(v).ok());
    EXPECT_EQ(v.use_count(), 6);
    { auto gone = std::move(rx); }
    EXPECT_EQ(v.use_count(), 1) << "queued values must be destroyed with the receiver";
}

SMARM_TEST(Channel, TryRecvNeverParks) {
    auto [tx, rx] = smarm::channel<int>();
    EXPECT_EQ(rx.try_recv().status, smarm::recv_status::empty);
    (void)tx.send(3);
    auto r = rx.try_recv();
    ASSERT_TRUE(r);
    EXPECT_EQ(*r.value, 3);
}

SMARM_TEST(Channel, RecvTimeoutTimesOutNeverEarly) {
    auto [tx, rx] = smarm::channel<int>();
    auto t0 = steady::now();
    auto r = rx.recv_timeout(20ms);
    EXPECT_EQ(r.status, smarm::recv_status::timeout);
    EXPECT_GE(steady::now() - t0, 20ms);
    EXPECT_LT(steady::now() - t0, 2s);
    (void)tx;
}

TEST(Channel, RecvTimeoutMessageRacingTheDeadlineWins) {
    // The message is queued before the receiver runs again, even though the
    // deadline has passed by then: it must be delivered, not reported late.
    smarm_test::run(
        [] {
            auto [tx, rx] = smarm::channel<int>();
            auto h = smarm::spawn([tx = std::move(tx)] {
                auto t0 = steady::now();
                while (steady::now() - t0 < 30ms) {
                }  // hog the only scheduler past the deadline
                (void)tx.send(7);
            });
            auto r = rx.recv_timeout(5ms);
            ASSERT_EQ(r.status, smarm::recv_status::ok);
            EXPECT_EQ(*r.value, 7);
            h.join();
        },
        1);
}

SMARM_TEST(Channel, RecvTimeoutReportsClosed) {
    auto [tx, rx] = smarm::channel<int>();
    smarm::spawn([tx = std::move(tx)] { smarm::sleep(2ms); }).detach();
    EXPECT_EQ(rx.recv_timeout(10s).status, smarm::recv_status::closed);
}

SMARM_TEST(Channel, RecvMatchSkipsAndKeepsOrder) {
    auto [tx, rx] = smarm::channel<int>();
    for (int i : {1, 2, 3, 4})
        (void)tx.send(i);
    auto even = rx.recv_match([](int v) { return v % 2 == 0; });
    EXPECT_EQ(*even, 2);
    EXPECT_EQ(rx.try_recv_match([](int v) { return v > 10; }).status, smarm::recv_status::empty);
    EXPECT_EQ(*rx.recv(), 1);
    EXPECT_EQ(*rx.recv(), 3);
    EXPECT_EQ(*rx.recv(), 4);
}

SMARM_TEST(Channel, RecvMatchParkedOnNonMatchingSeesClosure) {
    auto [tx, rx] = smarm::channel<int>();
    (void)tx.send(1);
    smarm::spawn([tx = std::move(tx)] { smarm::sleep(2ms); }).detach();
    auto v = rx.recv_match([](int v) { return v == 42; });
    EXPECT_FALSE(v.has_value());
}

SMARM_TEST(Channel, TwoActorsReceivingOnOneChannelIsAnError) {
    auto [tx, rx] = smarm::channel<int>();
    auto first = smarm::spawn([&rx = rx] { (void)rx.recv(); });
    smarm::sleep(5ms);  // first is parked in recv
    auto second = smarm::spawn([&rx = rx] { (void)rx.recv(); });
    auto o = second.join();
    ASSERT_EQ(o.kind, smarm::exit_kind::panic);
    try {
        std::rethrow_exception(o.error);
    } catch (const std::logic_error& e) {
        EXPECT_NE(std::string(e.what()).find("exactly one receiving actor"), std::string::npos)
            << e.what();
    }
    (void)tx.send(1);
    EXPECT_EQ(first.join().kind, smarm::exit_kind::exit);
}

// Waits (yielding) until `p` is parked.
void wait_parked(smarm::pid p) {
    for (;;) {
        auto i = smarm::introspect::info(p);
        if (i && i->state == "parked") return;
        smarm::yield_now();
    }
}

// Spawns an actor parked in rx.recv() and requests its stop: with one
// scheduler it is woken but has not run again when this returns.
smarm::join_handle stop_a_parked_receiver(const smarm::receiver<int>& rx) {
    auto a = smarm::spawn([&rx] { (void)rx.recv(); });
    wait_parked(a.id());
    smarm::request_stop(a.id());
    return a;
}

TEST(Channel, AStoppedRecvWithdrawsItsHandOffSlot) {
    // A parked recv() registers a slot in its frame for the next send; once
    // it is stopped the frame is gone, so the send must queue instead.
    smarm_test::run(
        [] {
            auto [tx, rx] = smarm::channel<int>();
            auto a = stop_a_parked_receiver(rx);
            EXPECT_EQ(a.join().kind, smarm::exit_kind::stopped);
            ASSERT_TRUE(tx.send(1).ok());
            auto r = rx.try_recv();
            ASSERT_TRUE(r) << "the message went to the stopped receiver's frame";
            EXPECT_EQ(*r.value, 1);
        },
        1);
}

TEST(Channel, AMessageHandedToAStoppedRecvGoesBackToTheQueue) {
    // One scheduler: the stop wakes `a`, then the send hands 42 into its slot
    // before `a` runs again and unwinds; 42 must not go down with the frame.
    smarm_test::run(
        [] {
            auto [tx, rx] = smarm::channel<int>();
            auto a = stop_a_parked_receiver(rx);
            ASSERT_TRUE(tx.send(42).ok());
            ASSERT_TRUE(tx.send(43).ok());
            EXPECT_EQ(a.join().kind, smarm::exit_kind::stopped);
            auto r = rx.try_recv();
            ASSERT_TRUE(r) << "the handed message was lost";
            EXPECT_EQ(*r.value, 42) << "and it keeps its place before 43";
            EXPECT_EQ(*rx.try_recv().value, 43);
        },
        1);
}

TEST(Channel, ARecvWokenByADeferredStopParksAgainAndReceives) {
    // Under no_preempt a stop wakes the parked recv() without throwing: it
    // withdraws its slot, parks again, and the next send still reaches it.
    smarm_test::run(
        [] {
            auto [tx, rx] = smarm::channel<int>();
            std::atomic<int> got{0};
            auto a = smarm::spawn([&rx = rx, &got] {
                {
                    smarm::no_preempt np;
                    got = *rx.recv();
                }
                SMARM_CHECK();  // the deferred stop lands here
                got = -1;
            });
            wait_parked(a.id());
            smarm::request_stop(a.id());
            wait_parked(a.id());  // woken by the stop, parked again
            ASSERT_TRUE(tx.send(7).ok());
            EXPECT_EQ(a.join().kind, smarm::exit_kind::stopped);
            EXPECT_EQ(got.load(), 7);
        },
        1);
}

SMARM_TEST(Channel, SendFromForeignThread) {
    auto [tx, rx] = smarm::channel<int>();
    std::thread t([tx = std::move(tx)] {
        std::this_thread::sleep_for(5ms);
        (void)tx.send(99);
    });
    EXPECT_EQ(*rx.recv(), 99);
    t.join();
}

SMARM_TEST(Channel, PingPongManyRounds) {
    auto [atx, arx] = smarm::channel<int>();
    auto [btx, brx] = smarm::channel<int>();
    auto h = smarm::spawn([arx = std::move(arx), btx = std::move(btx)] {
        while (auto v = arx.recv())
            (void)btx.send(*v + 1);
    });
    int v = 0;
    for (int i = 0; i < 100000; ++i) {
        (void)atx.send(v);
        v = *brx.recv();
    }
    EXPECT_EQ(v, 100000);
    { auto close = std::move(atx); }
    h.join();
}

}  // namespace
