#include <smarm/channel.hpp>
#include <smarm/introspect.hpp>
#include <smarm/pg.hpp>
#include <smarm/progress.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include <algorithm>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;

namespace {

SMARM_TEST(Introspect, SnapshotSeesParkedChildrenWithParentage) {
    smarm::pid me = smarm::self_pid();
    std::vector<smarm::sender<int>> txs;
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 3; ++i) {
        auto [tx, rx] = smarm::channel<int>();
        txs.push_back(std::move(tx));
        // Work-first spawn: each child is parked in recv when spawn returns.
        hs.push_back(smarm::spawn([rx = std::move(rx)] { (void)rx.recv(); }));
    }
    auto s = smarm::introspect::take_snapshot();
    EXPECT_EQ(s.version, smarm::introspect::format_version);
    int children = 0;
    for (auto& a : s.actors) {
        if (a.parent == me) {
            ++children;
            EXPECT_EQ(a.state, "parked");
        }
    }
    EXPECT_EQ(children, 3);
    auto info = smarm::introspect::info(hs[0].id());
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->parent, me);
    EXPECT_FALSE(smarm::introspect::info(smarm::pid{hs[0].id().index, 12345}).has_value());

    auto forest = smarm::introspect::tree();
    ASSERT_EQ(forest.size(), 1u);
    EXPECT_EQ(forest[0].actor.id, me);
    EXPECT_EQ(forest[0].children.size(), 3u);
    auto text = smarm::introspect::render_tree(forest);
    EXPECT_NE(text.find(me.to_string()), std::string::npos);
    txs.clear();
    for (auto& h : hs)
        h.join();
}

SMARM_TEST(Introspect, OrphansAreReRootedAndFlagged) {
    auto [tx, rx] = smarm::channel<smarm::pid>();
    auto [gotx, gorx] = smarm::channel<int>();
    smarm::spawn([tx = std::move(tx), go = std::move(gorx)]() mutable {
        auto child = smarm::spawn([go = std::move(go)] { (void)go.recv(); });
        (void)tx.send(child.id());
        child.detach();
    }).join();  // the parent is gone; its child lives on
    smarm::pid orphan = *rx.recv();
    auto forest = smarm::introspect::tree();
    auto it =
        std::find_if(forest.begin(), forest.end(), [&](auto& n) { return n.actor.id == orphan; });
    ASSERT_NE(it, forest.end());
    EXPECT_TRUE(it->orphan);
    (void)gotx.send(1);
}

// Utilisation per scheduler: an actor computing for 200 ms keeps one
// scheduler busy for that long; the parts add up to the running time; an
// idle runtime's time goes to spinning and parked, not busy.
SMARM_TEST(Introspect, SchedulerUtilisationSplitsBusySpinningAndParked) {
    const auto before = smarm::introspect::stats();
    ASSERT_EQ(before.schedulers.size(), 2u);
    auto busy = smarm::spawn([] {
        const auto until = std::chrono::steady_clock::now() + 200ms;
        while (std::chrono::steady_clock::now() < until) {
        }
    });
    busy.join();
    const auto mid = smarm::introspect::stats();
    std::uint64_t busy_gain = 0;
    for (std::size_t i = 0; i < 2; ++i) {
        const auto& k = mid.schedulers[i];
        EXPECT_EQ(k.busy_ns + k.spinning_ns + k.parked_ns, k.running_ns) << i;
        // (A scheduler thread may have started just after `before`.)
        EXPECT_GE(k.running_ns, before.schedulers[i].running_ns + 150'000'000) << i;
        busy_gain = std::max(busy_gain, k.busy_ns - before.schedulers[i].busy_ns);
    }
    // The spinning actor's 200 ms are one scheduler's busy time (wall time:
    // a preempted thread still counts as busy).
    EXPECT_GE(busy_gain, 190'000'000u);
    // Now idle: both schedulers' next 100 ms are mostly idle time.
    smarm::sleep(100ms);
    const auto after = smarm::introspect::stats();
    for (std::size_t i = 0; i < 2; ++i) {
        const auto idle = (after.schedulers[i].spinning_ns + after.schedulers[i].parked_ns) -
                          (mid.schedulers[i].spinning_ns + mid.schedulers[i].parked_ns);
        EXPECT_GE(idle, 50'000'000u) << i;
    }
}

// A parked actor says what it waits for; its wait epoch stays while it
// stays parked and changes once it has run again.
SMARM_TEST(Introspect, AParkedActorSaysWhatItWaitsFor) {
    auto [tx, rx] = smarm::channel<int>();
    auto receiver = smarm::spawn([rx = std::move(rx)]() mutable {
        while (rx.recv()) {
        }
    });
    auto sleeper = smarm::spawn([] { smarm::sleep(10s); });
    auto wait_of = [](smarm::pid p) -> std::pair<std::string, std::uint32_t> {
        for (int i = 0; i < 2000; ++i) {
            if (auto a = smarm::introspect::info(p); a && a->state == "parked")
                return {a->wait, a->wait_epoch};
            smarm::sleep(1ms);
        }
        return {"never parked", 0};
    };
    const auto [r1, e1] = wait_of(receiver.id());
    EXPECT_EQ(r1, "channel");
    EXPECT_EQ(wait_of(sleeper.id()).first, "timer");
    smarm::sleep(5ms);
    EXPECT_EQ(wait_of(receiver.id()).second, e1);  // still the same wait
    ASSERT_TRUE(tx.send(1).ok());
    const auto [r2, e2] = wait_of(receiver.id());
    EXPECT_EQ(r2, "channel");
    EXPECT_NE(e2, e1);  // it ran and parked again
    { auto close = std::move(tx); }
    receiver.join();
    smarm::request_stop(sleeper.id());
    (void)sleeper.join();
}

// A registered inbox that nobody reads shows its depth and how long its
// oldest message has waited; a group member's inbox counts too; draining
// them brings both back to 0.
SMARM_TEST(Introspect, AFilledMailboxShowsItsDepthAndOldestAge) {
    auto [tx, rx] = smarm::channel<int>();
    auto [gtx, grx] = smarm::channel<int>();
    auto [go_tx, go_rx] = smarm::channel<int>();
    auto holder = smarm::spawn([tx = tx, gtx = gtx, rx = std::move(rx), grx = std::move(grx),
                                go_rx = std::move(go_rx)]() mutable {
        (void)smarm::register_name(smarm::name<int>("introspect-inbox"), tx);
        smarm::join(smarm::group<int>("introspect-group"), gtx);
        (void)go_rx.recv();  // parked elsewhere while its inboxes fill
        for (int i = 0; i < 5; ++i)
            (void)rx.recv();
        (void)grx.recv();
        (void)go_rx.recv();
    });
    for (int i = 0; i < 5; ++i)
        ASSERT_TRUE(tx.send(i).ok());
    ASSERT_TRUE(gtx.send(9).ok());
    smarm::sleep(60ms);
    auto a = smarm::introspect::info(holder.id());
    ASSERT_TRUE(a);
    ASSERT_TRUE(a->mailbox_depth && a->mailbox_age_ns);
    EXPECT_EQ(*a->mailbox_depth, 6u);
    EXPECT_GE(*a->mailbox_age_ns, 50'000'000u);  // stamped no later than the send
    EXPECT_LT(*a->mailbox_age_ns, 30'000'000'000u);
    EXPECT_EQ(a->names, std::vector<std::string>{"introspect-inbox"});
    EXPECT_EQ(a->groups, std::vector<std::string>{"introspect-group"});
    bool in_snapshot = false;
    for (auto& s : smarm::introspect::take_snapshot().actors)
        if (s.id == holder.id()) {
            in_snapshot = true;
            EXPECT_EQ(s.mailbox_depth.value_or(0), 6u);
            EXPECT_GE(s.mailbox_age_ns.value_or(0), *a->mailbox_age_ns);  // it only grows
        }
    EXPECT_TRUE(in_snapshot);
    ASSERT_TRUE(go_tx.send(1).ok());  // drain
    std::optional<smarm::introspect::actor_info> b;
    for (int i = 0; i < 2000; ++i) {
        b = smarm::introspect::info(holder.id());
        if (b && b->state == "parked" && b->mailbox_depth == 0u) break;
        smarm::sleep(1ms);
    }
    ASSERT_TRUE(b && b->mailbox_depth && b->mailbox_age_ns);
    EXPECT_EQ(*b->mailbox_depth, 0u);
    EXPECT_EQ(*b->mailbox_age_ns, 0u);
    ASSERT_TRUE(go_tx.send(2).ok());
    holder.join();
}

// A supervisor publishes its restarts and each child's last exit; the
// runtime's counters carry the capacity and the uptime.
SMARM_TEST(Introspect, SupervisorsPublishRestartsAndLastExits) {
    auto crashes = std::make_shared<std::atomic<int>>(0);
    smarm::child_spec flaky{"flaky", [crashes] {
                                if (crashes->fetch_add(1) == 0)
                                    throw std::runtime_error("boom on purpose");
                                smarm::sleep(10s);
                            }};
    smarm::child_spec steady{"steady", [] { smarm::sleep(10s); }};
    auto sup = smarm::start_supervisor({}, {flaky, steady});
    (void)smarm::start_child(sup,
                             {"temp", [] { smarm::sleep(10s); }, smarm::restart_policy::temporary});
    std::optional<smarm::introspect::supervisor_info> mine;
    for (int i = 0; i < 2000 && !(mine && mine->restarts == 1 && mine->active == 3); ++i) {
        mine.reset();
        for (auto& s : smarm::introspect::supervisors())
            if (s.id == sup.id) mine = s;
        smarm::sleep(1ms);
    }
    ASSERT_TRUE(mine);
    EXPECT_EQ(mine->strategy, "one_for_one");
    EXPECT_EQ(mine->max_restarts, 3u);
    EXPECT_EQ(mine->period_ns, 5'000'000'000u);
    EXPECT_EQ(mine->restarts, 1u);
    EXPECT_EQ(mine->active, 3u);
    EXPECT_EQ(mine->temporary, 1u);
    ASSERT_EQ(mine->children.size(), 2u);  // the temporary child is only counted
    EXPECT_EQ(mine->children[0].id, "flaky");
    EXPECT_TRUE(mine->children[0].running);
    EXPECT_TRUE(mine->children[0].actor.valid());
    EXPECT_EQ(mine->children[0].restart, "permanent");
    EXPECT_EQ(mine->children[0].restarts, 1u);
    EXPECT_EQ(mine->children[0].last_exit, "panic: boom on purpose");
    EXPECT_EQ(mine->children[1].id, "steady");
    EXPECT_EQ(mine->children[1].restarts, 0u);
    EXPECT_EQ(mine->children[1].last_exit, "");
    const auto st = smarm::introspect::stats();
    EXPECT_EQ(st.max_actors, std::uint64_t{1} << 16);  // smarm_test::config's
    EXPECT_GT(st.uptime_ns, 0u);
    smarm::request_stop(sup.id);
    for (int i = 0; i < 2000; ++i) {
        bool listed = false;
        for (auto& s : smarm::introspect::supervisors())
            listed = listed || s.id == sup.id;
        if (!listed) break;
        smarm::sleep(1ms);
    }
    for (auto& s : smarm::introspect::supervisors())
        EXPECT_NE(s.id, sup.id) << "a stopped supervisor stays listed";
}

// An actor computing for 100 ms through observation points (check())
// accrues about that much CPU time; a parked one none.
SMARM_TEST(Introspect, AComputingActorAccruesCpuTime) {
    auto [tx, rx] = smarm::channel<int>();
    auto idle = smarm::spawn([rx = std::move(rx)]() mutable { (void)rx.recv(); });
    std::atomic<bool> done{false};
    auto busy = smarm::spawn([&done] {
        const auto until = std::chrono::steady_clock::now() + 100ms;
        while (std::chrono::steady_clock::now() < until)
            smarm::check();
        done = true;
        smarm::sleep(10s);  // parked afterwards, its time kept
    });
    while (!done.load())
        smarm::sleep(1ms);
    auto b = smarm::introspect::info(busy.id());
    auto i = smarm::introspect::info(idle.id());
    ASSERT_TRUE(b && i);
    EXPECT_GE(b->cpu_ns, 80'000'000u);     // sampled: the tail after the last read is not counted
    EXPECT_LE(b->cpu_ns, 2'000'000'000u);  // wall time at most, with slack for a loaded machine
    EXPECT_LT(i->cpu_ns, 5'000'000u);
    (void)tx.send(1);
    idle.join();
    smarm::request_stop(busy.id());
    (void)busy.join();
}

SMARM_TEST(Introspect, MessagesReceivedAreCounted) {
    auto [tx, rx] = smarm::channel<int>();
    for (int i = 0; i < 5; ++i)
        (void)tx.send(i);
    for (int i = 0; i < 5; ++i)
        (void)rx.recv();
    auto me = smarm::introspect::info(smarm::self_pid());
    ASSERT_TRUE(me.has_value());
    EXPECT_EQ(me->messages_received, 5u);
}

SMARM_TEST(Introspect, AParkedJoinerIsCountedAndGoneWithItsTarget) {
    auto [tx, rx] = smarm::channel<int>();
    auto target = smarm::spawn([rx = std::move(rx)] { (void)rx.recv(); });
    const smarm::pid target_id = target.id();
    auto joiner = smarm::spawn(
        [h = std::move(target)]() mutable { EXPECT_EQ(h.join().kind, smarm::exit_kind::exit); });
    // The joiner's only park is its join.
    for (int i = 0; i < 100000; ++i) {
        auto j = smarm::introspect::info(joiner.id());
        if (j && j->state == "parked") break;
        smarm::yield_now();
    }
    auto t = smarm::introspect::info(target_id);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->joiners, 1u);
    (void)tx.send(1);
    joiner.join();
    EXPECT_FALSE(smarm::introspect::info(target_id).has_value());
    // New tenants of the recycled slots start with clean counts.
    std::vector<smarm::sender<int>> txs;
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 4; ++i) {
        auto [ktx, krx] = smarm::channel<int>();
        txs.push_back(std::move(ktx));
        hs.push_back(smarm::spawn([krx = std::move(krx)] { (void)krx.recv(); }));
    }
    for (auto& h : hs) {
        auto k = smarm::introspect::info(h.id());
        ASSERT_TRUE(k.has_value());
        EXPECT_EQ(k->joiners, 0u);
        EXPECT_EQ(k->messages_received, 0u);
    }
    txs.clear();
    for (auto& h : hs)
        h.join();
}

void step_a() {
    SMARM_PROGRESS("introspect_test.step");
}
void step_b() {
    SMARM_PROGRESS("introspect_test.step");
}

TEST(Progress, CountersSumByName) {
    auto before = smarm::progress_point::snapshot()["introspect_test.step"];
    for (int i = 0; i < 3; ++i)
        step_a();
    for (int i = 0; i < 4; ++i)
        step_b();
    EXPECT_EQ(smarm::progress_point::snapshot()["introspect_test.step"], before + 7);
}

}  // namespace
