#include <smarm/channel.hpp>
#include <smarm/monitor.hpp>
#include <smarm/runtime.hpp>
#include <smarm/supervisor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;

namespace {

// Collects "start:<id>" / "stop:<id>" events from children.
struct event_log {
    smarm::sender<std::string> tx;
    smarm::receiver<std::string> rx;
    event_log() {
        auto [t, r] = smarm::channel<std::string>();
        tx = std::move(t);
        rx = std::move(r);
    }
    std::vector<std::string> take(std::size_t n) {
        std::vector<std::string> out;
        for (std::size_t i = 0; i < n; ++i) {
            auto r = rx.recv_timeout(5s);
            if (!r) break;
            out.push_back(*r.value);
        }
        return out;
    }
};

// A child that logs its start, then waits; when `crash_next` is set it
// throws; when stopped it logs "stop:<id>". It acks its start (init_body)
// only after logging it, so the log shows the order the supervisor started
// the children in: with a plain body the ack comes first, and the next
// sibling could log before this one when the ack's send yields (a spent
// timeslice under ASan did).
struct puppet_child {
    static smarm::child_spec make(std::string id, smarm::sender<std::string> log,
                                  std::shared_ptr<std::atomic<int>> crash_next) {
        smarm::child_spec s;
        s.id = id;
        s.init_body = [id, log, crash_next](const std::function<void()>& started) {
            try {
                // Inside the try: a stop may land at the send's own
                // observation point (after the push), and must be logged
                // like any other.
                (void)log.send("start:" + id);
                started();
                for (;;) {
                    smarm::sleep(1ms);
                    if (crash_next && crash_next->exchange(0) == 1)
                        throw std::runtime_error("crash " + id);
                }
            } catch (const smarm::stopped&) {
                (void)log.send("stop:" + id);
                throw;
            }
        };
        return s;
    }
};

TEST(Supervisor, TransientChildThatThrowsTwiceIsStartedThreeTimes) {
    std::atomic<int> starts{0};
    smarm_test::run([&] {
        auto [done_tx, done_rx] = smarm::channel<int>();
        auto sup = smarm::start_supervisor(
            {}, {{"t",
                  [&starts, done_tx] {
                      if (starts.fetch_add(1) < 2) throw std::runtime_error("early failure");
                      (void)done_tx.send(1);  // third start returns normally
                  },
                  smarm::restart_policy::transient}});
        EXPECT_EQ(*done_rx.recv(), 1);
        smarm::sleep(10ms);  // a transient normal exit is not restarted
        EXPECT_EQ(smarm::count_children(sup).active, 0u);
        smarm::request_stop(sup.id);
    });
    EXPECT_EQ(starts.load(), 3);
}

std::vector<std::string> run_strategy(smarm::restart_strategy s) {
    std::vector<std::string> events;
    smarm_test::run([&] {
        event_log log;
        auto crash_b = std::make_shared<std::atomic<int>>(0);
        smarm::supervisor_options o;
        o.strategy = s;
        auto sup = smarm::start_supervisor(
            o, {puppet_child::make("a", log.tx, nullptr), puppet_child::make("b", log.tx, crash_b),
                puppet_child::make("c", log.tx, nullptr)});
        auto first = log.take(3);
        EXPECT_EQ(first, (std::vector<std::string>{"start:a", "start:b", "start:c"}));
        crash_b->store(1);
        std::size_t expect = s == smarm::restart_strategy::one_for_one   ? 1
                             : s == smarm::restart_strategy::one_for_all ? 5
                                                                         : 3;
        events = log.take(expect);
        auto m = smarm::monitor(sup.id);
        smarm::request_stop(sup.id);
        (void)m.rx.recv();
    });
    return events;
}

TEST(Supervisor, OneForOneRestartsOnlyTheFailedChild) {
    EXPECT_EQ(run_strategy(smarm::restart_strategy::one_for_one),
              (std::vector<std::string>{"start:b"}));
}

TEST(Supervisor, OneForAllStopsOthersInReverseAndRestartsAllInOrder) {
    EXPECT_EQ(run_strategy(smarm::restart_strategy::one_for_all),
              (std::vector<std::string>{"stop:c", "stop:a", "start:a", "start:b", "start:c"}));
}

TEST(Supervisor, RestForOneRestartsTheFailedAndLaterChildren) {
    EXPECT_EQ(run_strategy(smarm::restart_strategy::rest_for_one),
              (std::vector<std::string>{"stop:c", "start:b", "start:c"}));
}

SMARM_TEST(Supervisor, IntensityCapGivesUpAndStopsSurvivorsInReverseOrder) {
    event_log log;
    auto before = smarm::supervisor_totals();
    smarm::supervisor_options o;
    o.max_restarts = 2;
    o.period = 10s;
    // Monitor before the supervisor first runs (spawn is work-first and
    // this supervisor gives up at once).
    std::optional<smarm::monitor_ref> mon;
    {
        smarm::no_preempt hold;
        auto sup =
            smarm::start_supervisor(o, {puppet_child::make("a", log.tx, nullptr),
                                        puppet_child::make("b", log.tx, nullptr),
                                        {"crasher", [] { throw std::runtime_error("always"); }}});
        mon = smarm::monitor(sup.id);
    }
    auto& m = *mon;
    auto d = m.rx.recv();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->reason, smarm::down_reason::panic);
    EXPECT_THROW(std::rethrow_exception(d->error), smarm::supervisor_gave_up);
    auto ev = log.take(4);
    EXPECT_EQ(ev, (std::vector<std::string>{"start:a", "start:b", "stop:b", "stop:a"}));
    auto after = smarm::supervisor_totals();
    EXPECT_EQ(after.restarts - before.restarts, 2u);
    EXPECT_EQ(after.give_ups - before.give_ups, 1u);
}

SMARM_TEST(Supervisor, NestedSupervisorGivingUpIsRestartedByItsParent) {
    event_log log;
    auto crash_b = std::make_shared<std::atomic<int>>(0);
    smarm::supervisor_options inner_opts;
    inner_opts.max_restarts = 0;  // the inner one gives up at the first failure
    auto before = smarm::supervisor_totals();
    auto top = smarm::start_supervisor(
        {}, {smarm::supervisor_child("inner", inner_opts,
                                     {puppet_child::make("a", log.tx, nullptr),
                                      puppet_child::make("b", log.tx, crash_b)}),
             puppet_child::make("c", log.tx, nullptr)});
    EXPECT_EQ(log.take(3), (std::vector<std::string>{"start:a", "start:b", "start:c"}));
    crash_b->store(1);
    // b fails: the inner supervisor gives up (stopping a), the top one
    // restarts it, which starts a and b afresh; c is untouched.
    EXPECT_EQ(log.take(3), (std::vector<std::string>{"stop:a", "start:a", "start:b"}));
    auto after = smarm::supervisor_totals();
    EXPECT_EQ(after.give_ups - before.give_ups, 1u);
    EXPECT_EQ(after.restarts - before.restarts, 1u);
    auto names = smarm::which_children(top);
    ASSERT_EQ(names.size(), 2u);
    EXPECT_EQ(names[0].first, "inner");
    // Stopping the top stops c, then the inner supervisor, which stops
    // b then a.
    auto m = smarm::monitor(top.id);
    smarm::request_stop(top.id);
    (void)m.rx.recv();
    EXPECT_EQ(log.take(3), (std::vector<std::string>{"stop:c", "stop:b", "stop:a"}));
}

// OTP's rule: a temporary child is never restarted, even when a sibling's
// failure stops it under one_for_all; it is removed. (It was restarted.)
SMARM_TEST(Supervisor, OneForAllRemovesTheTemporaryChildrenItStops) {
    event_log log;
    auto crash_a = std::make_shared<std::atomic<int>>(0);
    smarm::supervisor_options o;
    o.strategy = smarm::restart_strategy::one_for_all;
    auto sup = smarm::start_supervisor(o, {puppet_child::make("a", log.tx, crash_a)});
    EXPECT_EQ(log.take(1), (std::vector<std::string>{"start:a"}));
    auto temp = puppet_child::make("t", log.tx, nullptr);
    temp.restart = smarm::restart_policy::temporary;
    (void)smarm::start_child(sup, temp);
    EXPECT_EQ(log.take(1), (std::vector<std::string>{"start:t"}));
    auto cast = puppet_child::make("u", log.tx, nullptr);
    cast.restart = smarm::restart_policy::temporary;
    EXPECT_TRUE(smarm::start_child_async(sup, cast));
    EXPECT_EQ(log.take(1), (std::vector<std::string>{"start:u"}));
    crash_a->store(1);
    EXPECT_EQ(log.take(3), (std::vector<std::string>{"stop:u", "stop:t", "start:a"}));
    const auto n = smarm::count_children(sup);
    EXPECT_EQ(n.specs, 1u);
    EXPECT_EQ(n.active, 1u);
    EXPECT_EQ(log.rx.recv_timeout(50ms).status, smarm::recv_status::timeout)
        << "a temporary child was started again";
    auto m = smarm::monitor(sup.id);
    smarm::request_stop(sup.id);
    (void)m.rx.recv();
}

SMARM_TEST(Supervisor, DynamicChildrenWithMaxChildren) {
    smarm::supervisor_options o;
    o.max_children = 2;
    auto sup = smarm::start_supervisor(o, {});
    auto forever = [] {
        for (;;)
            smarm::sleep(1s);
    };
    auto p1 = smarm::start_child(sup, {"c1", forever, smarm::restart_policy::temporary});
    auto p2 = smarm::start_child(sup, {"c2", forever, smarm::restart_policy::temporary});
    EXPECT_NE(p1, p2);
    try {
        smarm::start_child(sup, {"c3", forever, smarm::restart_policy::temporary});
        ADD_FAILURE() << "max_children not enforced";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("max_children (2)"), std::string::npos) << e.what();
    }
    auto n = smarm::count_children(sup);
    EXPECT_EQ(n.active, 2u);
    auto which = smarm::which_children(sup);
    ASSERT_EQ(which.size(), 2u);
    EXPECT_EQ(which[0].first, "c1");
    EXPECT_EQ(which[1].second, p2);
    // A temporary child that ends is removed, freeing a place.
    smarm::request_stop(p1);
    for (int i = 0; i < 1000 && smarm::count_children(sup).active != 1; ++i)
        smarm::sleep(1ms);
    EXPECT_EQ(smarm::count_children(sup).specs, 1u);
    (void)smarm::start_child(sup, {"c3", forever, smarm::restart_policy::temporary});
    smarm::request_stop(sup.id);
}

// start_child_async: no round trip; the children are listed in the order
// of the casts (they may begin to run in another on several schedulers:
// nothing waits for each), and one past max_children is dropped without
// running (its captures destroyed).
SMARM_TEST(Supervisor, AsyncStartsInOrderAndDropsPastMaxChildren) {
    smarm::supervisor_options o;
    o.max_children = 2;
    auto sup = smarm::start_supervisor(o, {});
    auto [tx, rx] = smarm::channel<int>();
    auto held = std::make_shared<int>(3);  // captured by the third child alone
    std::weak_ptr<int> third = held;
    for (int i = 1; i <= 3; ++i) {
        std::shared_ptr<int> mine = i == 3 ? std::move(held) : nullptr;
        EXPECT_TRUE(smarm::start_child_async(sup, {"a" + std::to_string(i),
                                                   [tx = tx, i, mine] {
                                                       (void)tx.send(i);
                                                       for (;;)
                                                           smarm::sleep(1s);
                                                   },
                                                   smarm::restart_policy::temporary}));
    }
    std::vector<int> ran{*rx.recv(), *rx.recv()};
    std::sort(ran.begin(), ran.end());
    EXPECT_EQ(ran, (std::vector<int>{1, 2}));
    auto which = smarm::which_children(sup);  // a round trip: the casts before it are handled
    ASSERT_EQ(which.size(), 2u);
    EXPECT_EQ(which[0].first, "a1");
    EXPECT_EQ(which[1].first, "a2");
    EXPECT_TRUE(third.expired()) << "the refused child's function was kept";
    EXPECT_EQ(rx.try_recv().status, smarm::recv_status::empty);
    smarm::request_stop(sup.id);
    auto m = smarm::monitor(sup.id);
    (void)m.rx.recv();
    EXPECT_FALSE(smarm::start_child_async(sup, {"late", [] {}, smarm::restart_policy::temporary}))
        << "a stopped supervisor took a child";
}

}  // namespace
