#include <smarm/channel.hpp>
#include <smarm/introspect.hpp>
#include <smarm/monitor.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <stdexcept>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;

namespace {

// An actor parked until told how to end: 0 exit, 1 throw.
struct puppet {
    smarm::sender<int> tell;
    smarm::join_handle handle;
};

puppet spawn_puppet() {
    auto [tx, rx] = smarm::channel<int>();
    auto h = smarm::spawn([rx = std::move(rx)] {
        auto v = rx.recv();
        if (v && *v == 1) throw std::runtime_error("puppet panics");
    });
    return {std::move(tx), std::move(h)};
}

SMARM_TEST(Monitor, DownCarriesTheOutcome) {
    auto a = spawn_puppet();
    auto b = spawn_puppet();
    auto c = spawn_puppet();
    auto ma = smarm::monitor(a.handle.id());
    auto mb = smarm::monitor(b.handle.id());
    auto mc = smarm::monitor(c.handle.id());
    (void)a.tell.send(0);
    (void)b.tell.send(1);
    smarm::request_stop(c.handle.id());
    auto da = ma.rx.recv(), db = mb.rx.recv(), dc = mc.rx.recv();
    ASSERT_TRUE(da && db && dc);
    EXPECT_EQ(da->reason, smarm::down_reason::exit);
    EXPECT_EQ(da->who, a.handle.id());
    EXPECT_EQ(db->reason, smarm::down_reason::panic);
    EXPECT_THROW(std::rethrow_exception(db->error), std::runtime_error);
    EXPECT_EQ(dc->reason, smarm::down_reason::stopped);
    EXPECT_EQ(dc->monitor_id, mc.id);
    // exactly one down each
    EXPECT_EQ(ma.rx.try_recv().status, smarm::recv_status::closed);
}

// An actor that wakes its parent and then ends hands the CPU straight to the
// parent (a direct switch), so its end is finalized on the parent's turn: the
// down must still name the ended actor, generation included. One scheduler
// makes the switch order fixed; the first spawn makes the child's slot a
// reused one, so its generation differs from the parent's.
SMARM_TEST_N(Monitor, DownFromAnActorEndingInADirectSwitchNamesIt, 1) {
    smarm::spawn([] {}).join();  // the next spawn reuses this slot
    auto [tx, rx] = smarm::channel<int>();
    smarm::pid child;
    std::optional<smarm::monitor_ref> mon;
    {
        smarm::no_preempt hold;  // the child waits in the wake slot
        auto h = smarm::spawn([tx = std::move(tx)] { (void)tx.send(1); });
        child = h.id();
        mon = smarm::monitor(child);
        h.detach();
    }
    EXPECT_EQ(*rx.recv(), 1);  // runs the child, which wakes us and ends
    auto d = mon->rx.recv();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->reason, smarm::down_reason::exit);
    EXPECT_EQ(d->who, child);
    EXPECT_NE(child.generation, smarm::self_pid().generation)
        << "the test needs distinct generations";
}

SMARM_TEST(Monitor, NoProcForADeadOrStalePid) {
    auto h = smarm::spawn([] {});
    smarm::pid gone = h.id();
    h.join();
    auto m = smarm::monitor(gone);
    auto d = m.rx.recv();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->reason, smarm::down_reason::noproc);
    EXPECT_EQ(d->who, gone);
}

SMARM_TEST(Monitor, DemonitorCancels) {
    auto a = spawn_puppet();
    auto [tx, rx] = smarm::channel<smarm::down>();
    auto id = smarm::monitor(a.handle.id(), tx);
    EXPECT_TRUE(smarm::demonitor(a.handle.id(), id));
    EXPECT_FALSE(smarm::demonitor(a.handle.id(), id)) << "second demonitor";
    (void)a.tell.send(0);
    a.handle.join();
    EXPECT_EQ(rx.recv_timeout(20ms).status, smarm::recv_status::timeout) << "down after demonitor";
}

SMARM_TEST(Link, AbnormalExitStopsTheLinkedActor) {
    auto b = spawn_puppet();
    smarm::pid bid = b.handle.id();
    auto [ready_tx, ready_rx] = smarm::channel<int>();
    auto a = smarm::spawn([bid, ready_tx = std::move(ready_tx)] {
        EXPECT_TRUE(smarm::link(bid));
        (void)ready_tx.send(1);
        for (;;)
            smarm::sleep(1s);
    });
    (void)ready_rx.recv();
    (void)b.tell.send(1);  // b panics
    EXPECT_EQ(a.join().kind, smarm::exit_kind::stopped);
    EXPECT_EQ(b.handle.join().kind, smarm::exit_kind::panic);
}

SMARM_TEST(Link, NormalExitDoesNotPropagate) {
    auto b = spawn_puppet();
    smarm::pid bid = b.handle.id();
    auto [go_tx, go_rx] = smarm::channel<int>();
    auto a = smarm::spawn([bid, go_rx = std::move(go_rx)] {
        EXPECT_TRUE(smarm::link(bid));
        (void)go_rx.recv();
    });
    (void)b.tell.send(0);
    b.handle.join();
    smarm::sleep(5ms);
    (void)go_tx.send(1);
    EXPECT_EQ(a.join().kind, smarm::exit_kind::exit);
}

SMARM_TEST(Link, PropagationCascadesAlongAChain) {
    auto c = spawn_puppet();
    smarm::pid cid = c.handle.id();
    auto [ready_tx, ready_rx] = smarm::channel<smarm::pid>();
    auto b = smarm::spawn([cid, ready_tx] {
        smarm::link(cid);
        (void)ready_tx.send(smarm::self_pid());
        for (;;)
            smarm::sleep(1s);
    });
    smarm::pid bid = *ready_rx.recv();
    auto a = smarm::spawn([bid, ready_tx] {
        smarm::link(bid);
        (void)ready_tx.send(smarm::self_pid());
        for (;;)
            smarm::sleep(1s);
    });
    (void)ready_rx.recv();
    (void)c.tell.send(1);
    EXPECT_EQ(b.join().kind, smarm::exit_kind::stopped);
    EXPECT_EQ(a.join().kind, smarm::exit_kind::stopped);
}

SMARM_TEST(Link, TrapExitTurnsTheExitIntoAMessage) {
    auto b = spawn_puppet();
    auto c = spawn_puppet();
    auto trap = smarm::trap_exits();
    EXPECT_TRUE(smarm::link(b.handle.id()));
    EXPECT_TRUE(smarm::link(c.handle.id()));
    auto me = smarm::introspect::info(smarm::self_pid());
    ASSERT_TRUE(me);
    EXPECT_TRUE(me->trap_exit);
    EXPECT_EQ(me->links, 2u);
    (void)b.tell.send(1);  // panic: would stop us without the trap
    auto s1 = trap.recv();
    ASSERT_TRUE(s1);
    EXPECT_EQ(s1->from, b.handle.id());
    EXPECT_EQ(s1->reason, smarm::down_reason::panic);
    (void)c.tell.send(0);  // normal exits are delivered too
    auto s2 = trap.recv();
    ASSERT_TRUE(s2);
    EXPECT_EQ(s2->reason, smarm::down_reason::exit);
    b.handle.join();
    c.handle.join();
    smarm::check();  // not stopped
}

SMARM_TEST(Link, LinkToADeadActorFails) {
    auto h = smarm::spawn([] {});
    smarm::pid gone = h.id();
    h.join();
    EXPECT_FALSE(smarm::link(gone));
    auto trap = smarm::trap_exits();
    EXPECT_FALSE(smarm::link(gone));
    auto s = trap.recv();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->reason, smarm::down_reason::noproc);
}

SMARM_TEST(Link, UnlinkStopsPropagation) {
    auto b = spawn_puppet();
    smarm::pid bid = b.handle.id();
    auto [go_tx, go_rx] = smarm::channel<int>();
    auto a = smarm::spawn([bid, go_rx = std::move(go_rx)] {
        smarm::link(bid);
        smarm::unlink(bid);
        (void)go_rx.recv();
    });
    (void)b.tell.send(1);
    b.handle.join();
    smarm::sleep(5ms);
    (void)go_tx.send(1);
    EXPECT_EQ(a.join().kind, smarm::exit_kind::exit);
}

}  // namespace
