#include <smarm/gen_statem.hpp>
#include <smarm/monitor.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
namespace statem = smarm::statem;

namespace {

// A probe machine with three states; every row that matters logs what it
// saw ("<what>@<state>"), and get_log returns the log.
struct a {};
struct b {};
struct c {};
using state = std::variant<a, b, c>;

std::string name(const a&) {
    return "a";
}
std::string name(const b&) {
    return "b";
}
std::string name(const c&) {
    return "c";
}

struct go_a {};
struct go_b {};
struct go_c {};
struct stay_here {};
struct arm_state {
    std::chrono::nanoseconds after;
};
struct arm_named {
    std::string name;
    std::chrono::nanoseconds after;
};
struct cancel_named {
    std::string name;
};
// Arms a state timeout and a named timeout, then moves to b, in one row.
struct arm_both_go_b {
    std::string name;
    std::chrono::nanoseconds after;
};
// Arms a state timeout and `name`, both due at once, parks until their
// timers have fired, then re-arms both far in the future: the queued fires
// are stale and must never arrive.
struct fire_then_rearm {
    std::string name;
};
struct x {
    int id;
};
struct y {};
struct boom {};
struct quit {};
struct ask : statem::call_event<int> {};
struct refuse : statem::call_event<int> {};
struct hold : statem::call_event<int> {};
struct get_log : statem::call_event<std::vector<std::string>> {};

using event = std::variant<go_a, go_b, go_c, stay_here, arm_state, arm_named, cancel_named,
                           arm_both_go_b, fire_then_rearm, x, y, boom, quit, ask, refuse, hold,
                           get_log, statem::state_timeout, statem::timeout, statem::info<int>>;
using result = statem::result<state>;
using cx = statem::ctx<event>;

struct data {
    std::vector<std::string> log;
    std::vector<statem::reply_to<int>> held;
};

auto rows = statem::table{
    [](auto& s, statem::enter, data& d, cx&) { d.log.push_back("enter@" + name(s)); },
    [](auto&, go_a&, data&, cx&) -> result { return a{}; },
    [](auto&, go_b&, data&, cx&) -> result { return b{}; },
    [](auto&, go_c&, data&, cx&) -> result { return c{}; },
    [](auto&, stay_here&, data&, cx&) -> result { return statem::stay; },
    [](auto&, arm_state& e, data&, cx& k) -> result {
        k.arm_state_timeout(e.after);
        return statem::stay;
    },
    [](auto&, arm_named& e, data&, cx& k) -> result {
        k.arm_timeout(e.name, e.after);
        return statem::stay;
    },
    [](auto&, cancel_named& e, data& d, cx& k) -> result {
        d.log.push_back("cancel " + e.name + (k.cancel_timeout(e.name) ? " pending" : " none"));
        return statem::stay;
    },
    [](auto&, arm_both_go_b& e, data&, cx& k) -> result {
        k.arm_state_timeout(1ms);
        k.arm_timeout(e.name, e.after);
        return b{};
    },
    [](auto&, fire_then_rearm& e, data& d, cx& k) -> result {
        k.arm_state_timeout(0ns);
        k.arm_timeout(e.name, 0ns);
        smarm::sleep(20ms);  // both timers fire meanwhile: their events are queued
        k.arm_state_timeout(10s);
        k.arm_timeout(e.name, 10s);
        d.log.push_back("rearmed " + e.name);
        return statem::stay;
    },
    // x waits in a and b; c serves it.
    [](a&, x&, data&, cx&) -> result { return statem::postpone; },
    [](b&, x&, data&, cx&) -> result { return statem::postpone; },
    [](c&, x& e, data& d, cx&) -> result {
        d.log.push_back("x" + std::to_string(e.id) + "@c");
        return statem::stay;
    },
    [](auto& s, y&, data& d, cx&) -> result {
        d.log.push_back("y@" + name(s));
        return statem::stay;
    },
    [](auto&, boom&, data&, cx&) -> result { throw std::runtime_error("boom"); },
    [](auto&, quit&, data&, cx&) -> result { return statem::stop; },
    // ask waits in a; b and c answer it differently.
    [](a&, ask&, data& d, cx&) -> result {
        d.log.push_back("ask postponed");
        return statem::postpone;
    },
    [](b&, ask& e, data&, cx&) -> result {
        e.reply(2);
        return statem::stay;
    },
    [](c&, ask& e, data&, cx&) -> result {
        e.reply(3);
        return statem::stay;
    },
    [](auto&, refuse&, data&, cx&) -> result { return statem::unhandled; },
    [](auto&, hold& e, data& d, cx&) -> result {
        d.held.push_back(std::move(e.reply));
        return statem::stay;
    },
    [](auto&, get_log& e, data& d, cx&) -> result {
        e.reply(d.log);
        return statem::stay;
    },
    [](auto& s, statem::state_timeout&, data& d, cx&) -> result {
        d.log.push_back("st@" + name(s));
        return statem::stay;
    },
    [](auto& s, statem::timeout& t, data& d, cx&) -> result {
        d.log.push_back("to " + t.name + "@" + name(s));
        return statem::stay;
    },
};

using probe = statem::table_machine<state, event, data, decltype(rows)>;

statem::ref<probe> start_probe() {
    return statem::start_table<state, event>(a{}, data{}, rows);
}

std::vector<std::string> log_of(const statem::ref<probe>& m) {
    auto r = statem::call<get_log>(m, 10s);
    if (!r) throw std::runtime_error("get_log failed");
    return *r.value;
}

bool contains(const std::vector<std::string>& log, const std::string& s) {
    return std::find(log.begin(), log.end(), s) != log.end();
}

/// Polls the log until `entry` appears (fails the test after 10 s).
std::vector<std::string> wait_for(const statem::ref<probe>& m, const std::string& entry) {
    auto t0 = smarm_test::steady::now();
    for (;;) {
        auto log = log_of(m);
        if (contains(log, entry)) return log;
        if (smarm_test::since(t0) > 10s) {
            ADD_FAILURE() << "never logged " << entry;
            return log;
        }
        smarm::sleep(1ms);
    }
}

/// Under a manual clock: true once `entry` is logged, time standing still
/// (a fire already queued can reach the machine after a call sent later:
/// they come on two channels).
bool logged_without_time_passing(const statem::ref<probe>& m, const std::string& entry) {
    for (int i = 0; i < 10'000; ++i) {
        if (contains(log_of(m), entry)) return true;
        smarm::yield_now();
    }
    return false;
}

SMARM_TEST(GenStatem, EnterRunsForInitialStateAndTransitionsOnly) {
    auto m = start_probe();
    statem::cast(m, stay_here{});
    statem::cast(m, go_a{});  // same state: a stay, no enter
    statem::cast(m, go_b{});
    statem::cast(m, go_c{});
    EXPECT_EQ(log_of(m), (std::vector<std::string>{"enter@a", "enter@b", "enter@c"}));
}

SMARM_TEST(GenStatem, StateTimeoutArrivesAsAnEvent) {
    auto m = start_probe();
    statem::cast(m, arm_state{1ms});
    wait_for(m, "st@a");
}

// Manual clock: the timeout fires at exactly 20 ms, stays or not.
SMARM_TEST_CLOCK(GenStatem, StayKeepsTheStateTimeout) {
    auto m = start_probe();
    statem::cast(m, arm_state{20ms});
    for (int i = 0; i < 10; ++i)
        statem::cast(m, stay_here{});
    statem::cast(m, go_a{});  // a -> a is a stay too
    (void)log_of(m);          // every cast handled
    clock.advance(19ms);
    EXPECT_FALSE(contains(log_of(m), "st@a"));
    clock.advance(1ms);
    EXPECT_TRUE(logged_without_time_passing(m, "st@a"));
}

SMARM_TEST_CLOCK(GenStatem, TransitionResetsTheStateTimeout) {
    auto m = start_probe();
    // One row arms a 1 ms state timeout and a 30 ms named probe, then moves
    // to b: the state timeout must die with the transition even though it
    // is due long before the probe (manual clock: both instants exact).
    statem::cast(m, arm_both_go_b{"probe", 30ms});
    (void)log_of(m);
    clock.advance(1ms);
    clock.advance(28ms);
    EXPECT_FALSE(contains(log_of(m), "to probe@b"));
    clock.advance(1ms);
    EXPECT_TRUE(logged_without_time_passing(m, "to probe@b"));
    auto log = log_of(m);
    for (auto& e : log)
        EXPECT_EQ(e.rfind("st@", 0), std::string::npos) << e;
}

SMARM_TEST(GenStatem, NamedTimeoutsSurviveTransitionsAndCancelIndividually) {
    auto m = start_probe();
    statem::cast(m, arm_named{"long", 10s});
    statem::cast(m, arm_both_go_b{"n1", 5ms});
    wait_for(m, "to n1@b");  // armed in a, fired in b
    statem::cast(m, go_c{});
    statem::cast(m, cancel_named{"long"});
    statem::cast(m, cancel_named{"long"});
    auto log = wait_for(m, "cancel long none");
    EXPECT_TRUE(contains(log, "cancel long pending"));
    // Fires already queued when their timeouts are re-armed never arrive.
    statem::cast(m, fire_then_rearm{"raced"});
    statem::cast(m, arm_named{"after", 5ms});
    log = wait_for(m, "to after@c");
    EXPECT_TRUE(contains(log, "rearmed raced"));
    EXPECT_FALSE(contains(log, "to raced@c"));
    EXPECT_FALSE(contains(log, "st@c"));
    statem::cast(m, cancel_named{"raced"});
    EXPECT_TRUE(contains(wait_for(m, "cancel raced pending"), "rearmed raced"));
}

SMARM_TEST(GenStatem, RearmingANameReplacesIt) {
    auto m = start_probe();
    statem::cast(m, arm_named{"t", 10s});
    statem::cast(m, arm_named{"t", 1ms});
    statem::cast(m, arm_named{"end", 50ms});
    auto log = wait_for(m, "to end@a");
    EXPECT_EQ(std::count(log.begin(), log.end(), "to t@a"), 1);
    statem::cast(m, cancel_named{"t"});
    EXPECT_TRUE(contains(wait_for(m, "cancel t none"), "to t@a"));
}

SMARM_TEST(GenStatem, PostponedEventsReplayFifoAheadOfNewInputAndMayPostponeAgain) {
    auto m = start_probe();
    statem::cast(m, x{1});
    statem::cast(m, x{2});
    statem::cast(m, go_b{});  // replayed in b: postponed again
    statem::cast(m, y{});
    statem::cast(m, go_c{});  // replayed in c: served, before the next y
    statem::cast(m, y{});
    EXPECT_EQ(log_of(m), (std::vector<std::string>{"enter@a", "enter@b", "y@b", "enter@c", "x1@c",
                                                   "x2@c", "y@c"}));
}

SMARM_TEST(GenStatem, PostponedCallIsAnsweredByALaterState) {
    auto m = start_probe();
    std::optional<smarm::call_result<int>> got;
    auto caller = smarm::spawn([&] { got = statem::call<ask>(m, 10s); });
    wait_for(m, "ask postponed");
    statem::cast(m, go_c{});
    caller.join();
    ASSERT_TRUE(got && *got);
    EXPECT_EQ(*got->value, 3);
}

SMARM_TEST(GenStatem, HandlerExceptionReleasesQueuedAndPostponedCallers) {
    auto m = start_probe();
    std::optional<smarm::call_result<int>> postponed;
    auto caller = smarm::spawn([&] { postponed = statem::call<ask>(m, 10s); });
    wait_for(m, "ask postponed");
    auto mon = smarm::monitor(m.id);
    statem::cast(m, boom{});
    auto queued = statem::call<get_log>(m, 10s);
    caller.join();
    EXPECT_EQ(queued.error, smarm::call_error::server_down);
    ASSERT_TRUE(postponed);
    EXPECT_EQ(postponed->error, smarm::call_error::server_down);
    EXPECT_EQ(mon.rx.recv()->reason, smarm::down_reason::panic);
}

SMARM_TEST(GenStatem, UnansweredCallFailsFastAndUnrepliedCallTimesOut) {
    auto m = start_probe();
    auto t0 = smarm_test::steady::now();
    auto r = statem::call<refuse>(m, 10s);
    EXPECT_EQ(r.error, smarm::call_error::server_down);
    EXPECT_LT(smarm_test::since(t0), 5s);
    auto h = statem::call<hold>(m, 20ms);
    EXPECT_EQ(h.error, smarm::call_error::timeout);
}

SMARM_TEST(GenStatem, InfoWithoutARowIsDroppedAndStopEndsTheMachine) {
    auto m = start_probe();
    EXPECT_TRUE(statem::send_info(m, 7));
    EXPECT_EQ(log_of(m), (std::vector<std::string>{"enter@a"}));
    auto mon = smarm::monitor(m.id);
    statem::cast(m, quit{});
    EXPECT_EQ(mon.rx.recv()->reason, smarm::down_reason::exit);
    EXPECT_FALSE(statem::cast(m, y{}));
    EXPECT_EQ(statem::call<get_log>(m, 1s).error, smarm::call_error::server_down);
}

SMARM_TEST(GenStatem, NamedMachineResolvesAtOnceAndRefusesADuplicate) {
    constexpr smarm::name<event> door{"statem-door"};
    auto m = statem::start_named<probe>(door, a{}, data{}, rows);
    auto r = statem::call<get_log>(door, 10s);
    ASSERT_TRUE(r);
    EXPECT_EQ(*r.value, std::vector<std::string>{"enter@a"});
    EXPECT_THROW((void)statem::start_named<probe>(door, a{}, data{}, rows), std::runtime_error);
    smarm::request_stop(m.id);
}

SMARM_TEST(GenStatem, StoppedMachineReleasesCallers) {
    auto m = start_probe();
    std::optional<smarm::call_result<int>> got;
    auto caller = smarm::spawn([&] { got = statem::call<ask>(m, 10s); });
    wait_for(m, "ask postponed");
    smarm::request_stop(m.id);
    caller.join();
    ASSERT_TRUE(got);
    EXPECT_EQ(got->error, smarm::call_error::server_down);
}

// A hand-written machine: sums events until a negative one, which reports
// the sum and stops it.
struct summer {
    using event_type = std::variant<int>;
    int total = 0;
    int entered = 0;
    smarm::sender<int> report;
    explicit summer(smarm::sender<int> r) : report(std::move(r)) {}
    void on_enter(statem::ctx<event_type>&) { ++entered; }
    statem::step handle(event_type& ev, statem::ctx<event_type>&) {
        int n = std::get<int>(ev);
        if (n < 0) {
            (void)report.send(total * 10 + entered);
            return statem::step::stop;
        }
        total += n;
        return statem::step::stayed;
    }
};

SMARM_TEST(GenStatem, HandWrittenMachine) {
    auto [tx, rx] = smarm::channel<int>();
    auto m = statem::start<summer>(tx);
    statem::cast(m, 2);
    statem::cast(m, 3);
    statem::cast(m, -1);
    EXPECT_EQ(rx.recv(), 51);  // sum 5, entered once
}

}  // namespace
