#pragma once
// The tracer's event sites in the runtime (trace.cpp; the model is in
// include/smarm/trace.hpp). Each site is one relaxed load of
// detail::hook_bits while not recording (the switch's sites share theirs
// with the causal profiler's, fiber.cpp), and folds away under
// -DSMARM_TRACE=OFF.

#include <smarm/detail/wait.hpp>
#include <smarm/pid.hpp>
#include <smarm/trace.hpp>

#include <cstdint>

#include "internal.hpp"
#include "scheduler.hpp"

namespace smarm::internal::trace_hooks {

/// The recorded event kinds (trace.cpp renders them).
enum class kind : std::uint8_t {
    run_begin = 1,  ///< a = pid
    run_end,        ///< a = pid, sub = leave, extra = wait_reason, x = wait argument (fd)
    spawn,          ///< a = child, b = parent (no_pid: none)
    exit,           ///< a = pid, sub = exit_kind
    send,           ///< a = sender (no_pid outside an actor), x = flow; sub 1: handed
                    ///< to the parked receiver b (x = 0), its next run receives
    recv,           ///< a = receiver, x = flow
    io_ready,       ///< a = pid woken, x = fd, sub = 0 read / 1 write
    timer,          ///< a = pid woken (no_pid: a call timer)
    restart,        ///< a = supervisor, b = the new child, x = interned child id
    span_begin,     ///< a = pid, x = interned name, b = interned detail
    span_end,       ///< a = pid, x = status, b = bytes
    counter,        ///< sub = counter, a = value
    job_begin,      ///< a blocking-pool job starts; a = the actor waiting for it
    job_end,        ///< a = the same
};

/// Why a run ended (kind::run_end's sub).
enum class leave : std::uint8_t { yield, preempted, park, finish, handoff };
/// kind::counter's sub.
enum class counter : std::uint8_t { run_queue, live_actors };

inline constexpr bool compiled_in = SMARM_TRACE_ENABLED != 0;

/// Appends one event to the calling thread's ring (trace.cpp).
void record(kind k, std::uint8_t sub, std::uint16_t extra, std::uint32_t x, std::uint64_t a,
            std::uint64_t b) noexcept;

[[gnu::always_inline]] inline bool on() noexcept {
    return detail::trace_active();
}
/// A pid in an event: (generation << 32) | index; an invalid pid keeps its
/// invalid index (no_pid).
[[gnu::always_inline]] inline constexpr std::uint64_t word(pid p) noexcept {
    return (std::uint64_t{p.generation} << 32) | p.index;
}
inline constexpr std::uint64_t no_pid = word(pid{});
[[gnu::always_inline]] inline constexpr bool is_pid(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w) != pid::invalid_index;
}
[[gnu::always_inline]] inline void event(kind k, std::uint64_t a, std::uint64_t b = 0,
                                         std::uint32_t x = 0, std::uint8_t sub = 0,
                                         std::uint16_t extra = 0) noexcept {
    if (on()) [[unlikely]]
        record(k, sub, extra, x, a, b);
}

/// The actor on `s` switches out (trace.cpp maps the reason).
void left(scheduler& s, const slot& sl, switch_reason why, detail::wait_reason wr,
          std::uint32_t arg) noexcept;
/// SMARM_TRACE=path: record from the first runtime on and write `path` at
/// exit (once per process; SMARM_TRACE_BUFFER sets the ring size per
/// thread: a full ring keeps its first events).
void start_from_env() noexcept;
/// Counters, at most once a millisecond per scheduler.
void sample_counters(scheduler& s) noexcept;

[[gnu::always_inline]] inline void on_leave(scheduler& s, const slot& sl, switch_reason why,
                                            detail::wait_reason wr, std::uint32_t arg) noexcept {
    if (on()) [[unlikely]]
        left(s, sl, why, wr, arg);
}
/// `sl` (made current on `s`) runs.
[[gnu::always_inline]] inline void on_resume(const scheduler& s, const slot& sl) noexcept {
    if (on()) [[unlikely]]
        record(kind::run_begin, 0, 0, 0, word(pid{sl.index, s.current_gen}), 0);
}
/// A turn of `s`'s loop.
[[gnu::always_inline]] inline void on_loop(scheduler& s) noexcept {
    if (on()) [[unlikely]]
        sample_counters(s);
}

}  // namespace smarm::internal::trace_hooks
