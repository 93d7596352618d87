#pragma once
// Which of the runtime's observers want its switch hooks: one byte, so a
// switch that none of them watches pays one relaxed load and one branch for
// all of them (fiber.cpp). Not a user API.

#include <atomic>
#include <cstdint>

namespace smarm::detail {

inline constexpr std::uint8_t hook_trace = 1;   ///< the tracer records (smarm/trace.hpp)
inline constexpr std::uint8_t hook_causal = 2;  ///< the causal profiler is armed (sticky)

/// Relaxed: a hook site that reads a stale value runs or skips one hook
/// around a start or stop, nothing else (each observer's own data is
/// ordered by its own protocol).
inline std::atomic<std::uint8_t> hook_bits{0};

[[gnu::always_inline]] inline bool hooks_on(std::uint8_t bit) noexcept {
    return (hook_bits.load(std::memory_order_relaxed) & bit) != 0;
}

}  // namespace smarm::detail
