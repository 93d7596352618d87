#pragma once
// Run a test body as the root actor of a fresh runtime.
//
//     SMARM_TEST(Channel, SendThenReceive) {      // 2 schedulers
//         auto [tx, rx] = smarm::channel<int>();
//         ...
//     }
//     SMARM_TEST_N(Channel, OneScheduler, 1) { ... }
//     SMARM_TEST_CLOCK(Timer, FiresOnTime) {     // time moves by clock.advance()
//         ...; clock.advance(10ms); ...
//     }
//
// The body is a function run as the root actor; gtest's assertions work
// in it (a failed ASSERT_* returns from the body, the run then ends when
// every actor has).

#include <smarm/clock.hpp>
#include <smarm/introspect.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <chrono>

namespace smarm_test {

inline smarm::runtime_config config(unsigned schedulers, std::size_t max_actors = 1 << 16) {
    smarm::runtime_config c;
    c.schedulers = schedulers;
    c.max_actors = max_actors;
    return c;
}

/// Runs `body` as the root actor on `schedulers` threads; returns when every
/// actor ended. An exception escaping the body propagates (gtest reports it).
inline void run(smarm::detail::unique_function body, unsigned schedulers = 2) {
    smarm::runtime rt(config(schedulers));
    rt.run(std::move(body));
}

/// Runs `body(clock)` as the root actor of a runtime whose time is a
/// manual_clock: timers, timeouts and deadlines move only by
/// clock.advance(), so timing assertions are exact.
template <class Body>
void run_with_clock(Body body, unsigned schedulers = 2) {
    smarm::manual_clock clock;
    smarm::runtime_config c = config(schedulers);
    c.clock = &clock;
    smarm::runtime rt(c);
    rt.run([&] { body(clock); });
}

/// Yields until actor `p` is parked (or gone): under a manual clock, an
/// actor parked on a timed wait has armed its timer, so an advance() after
/// this cannot outrun it.
inline void await_parked(smarm::pid p) {
    for (;;) {
        auto i = smarm::introspect::info(p);
        if (!i || i->state == "parked") return;
        smarm::yield_now();
    }
}

using steady = std::chrono::steady_clock;
inline auto since(steady::time_point t0) {
    return steady::now() - t0;
}

}  // namespace smarm_test

#define SMARM_TEST_N(suite, name, schedulers)                             \
    static void smarm_test_body_##suite##_##name();                       \
    TEST(suite, name) {                                                   \
        ::smarm_test::run(&smarm_test_body_##suite##_##name, schedulers); \
    }                                                                     \
    static void smarm_test_body_##suite##_##name()

#define SMARM_TEST(suite, name) SMARM_TEST_N(suite, name, 2)

#define SMARM_TEST_CLOCK(suite, name)                                           \
    static void smarm_test_body_##suite##_##name(::smarm::manual_clock& clock); \
    TEST(suite, name) {                                                         \
        ::smarm_test::run_with_clock(&smarm_test_body_##suite##_##name);        \
    }                                                                           \
    static void smarm_test_body_##suite##_##name([[maybe_unused]] ::smarm::manual_clock& clock)
