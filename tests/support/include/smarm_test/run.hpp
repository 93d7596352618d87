#pragma once
// Run a test body as the root actor of a fresh runtime.

#include <smarm/runtime.hpp>

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

using steady = std::chrono::steady_clock;
inline auto since(steady::time_point t0) {
    return steady::now() - t0;
}

}  // namespace smarm_test
