#pragma once
// The runtime's wait protocol as seen by the blocking primitives that live in
// headers (channel, select, mutex, timers). Not a user API.
//
// Protocol (see framework/src/state_word.hpp for the state machine):
//   auto epoch = begin_wait();      // the epoch of this wait (no write)
//   <register (self, epoch) with the waker, under the primitive's lock>
//   park();                         // returns once unpark_at(self, epoch) ran
//                                   // (possibly before park was even called)
// Every resume opens a fresh epoch, so a waker whose wait already ended is a
// no-op and a primitive never cancels its registrations in other objects.
// A wait that ends WITHOUT parking (select found a ready arm after
// registering elsewhere) must call retire_wait() before the next wait.
// `park()` throws smarm::stopped if a stop was requested for the actor;
// primitives that keep state about the waiter clean it up with RAII.

#include <smarm/clock.hpp>
#include <smarm/pid.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>

#include <smarm/detail/bump.hpp>
#include <smarm/detail/unique_function.hpp>

namespace smarm::detail {

/// The runtime's clock source while a run uses one (clock.hpp), else null.
/// acquire/release: a reader that sees the source sees it constructed.
inline std::atomic<const clock_source*> clock_override{nullptr};

/// The runtime's clock: steady_clock, or the run's clock_source. Its
/// time_point is steady_clock's, so deadlines pass through public APIs
/// typed with steady_clock unchanged.
struct clock {
    using duration = std::chrono::steady_clock::duration;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::steady_clock::time_point;
    static constexpr bool is_steady = true;
    static time_point now() noexcept {
        if (const clock_source* c = clock_override.load(std::memory_order_acquire)) [[unlikely]]
            return c->now();
        return std::chrono::steady_clock::now();
    }
    /// A clock_source is in use (timed waits then arm at once, in its time).
    static bool overridden() noexcept {
        return clock_override.load(std::memory_order_relaxed) != nullptr;
    }
};

/// The running actor's pid; throws std::logic_error naming `call` when the
/// caller is not an actor (outside smarm::run or on a foreign thread).
pid current_pid(const char* call);
/// The running actor's pid, or an invalid pid outside an actor.
pid current_pid_or_invalid() noexcept;
/// The epoch the current actor's next wait registers under.
std::uint32_t begin_wait() noexcept;
/// The current actor and its wait epoch, in one call. Throws
/// std::logic_error naming `call` outside an actor.
struct wait_token {
    pid self;
    std::uint32_t epoch;
    /// The actor's received-message counter (introspection), set by
    /// observe_and_open: count_received() bumps it without a runtime call.
    std::atomic<std::uint64_t>* received = nullptr;
};
/// Count one received message for the actor of `w` (observe_and_open's
/// token). Only the actor itself writes the counter: no locked RMW.
inline void count_received(const wait_token& w) noexcept {
    bump(*w.received);
}
wait_token open_wait(const char* call);

/// What a park waits for (trace events name it; smarm/trace.hpp).
enum class wait_reason : std::uint8_t {
    other,
    channel,   ///< a channel receive
    call,      ///< a call's reply
    io_read,   ///< an fd's readability (the argument is the fd)
    io_write,  ///< an fd's writability (the argument is the fd)
    timer,     ///< a sleep
    mutex,
    join,
    select,
    blocking,  ///< a blocking-pool job
    signal,
};

/// "channel", "call reply", "io read", ... ("other" for an unknown value).
const char* to_string(wait_reason r) noexcept;

/// Switch away until the open wait is unparked. Throws smarm::stopped when a
/// stop is pending (and the actor is not already unwinding). `why` and `arg`
/// (an fd for IO) only label the wait.
void park(wait_reason why = wait_reason::other, std::uint32_t arg = 0);

/// park(), then the epoch of the actor's next wait (begin_wait()).
std::uint32_t park_and_reopen(wait_reason why = wait_reason::other);

// Sanitizer builds keep the switch out of line, annotated (fiber.cpp).
#if defined(__x86_64__) && defined(__linux__) && !SMARM_ASAN && !SMARM_TSAN && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define SMARM_INLINE_PARK 1
/// A context as framework/src/switch_x86_64_sysv.S takes and returns it.
struct fiber_transfer {
    void* ctx;
    void* data;
};
extern "C" fiber_transfer smarm_jump_fcontext(void* to, void* data) noexcept;
/// park_and_reopen() in two halves around a switch made at the caller's
/// site (park_here).
fiber_transfer park_begin(wait_reason why) noexcept;
std::uint32_t park_end(fiber_transfer from);
#else
#define SMARM_INLINE_PARK 0
#endif

/// park_and_reopen() with the switch inlined into the caller, where
/// supported (x86-64 Linux without sanitizers). After a switch the
/// processor's return-stack predictor holds the other actor's return
/// addresses, so every return made above the switch mispredicts: the two
/// halves here each return on their own side of it, and an actor whose
/// receive loop inlines this makes no mispredicted return at all (ping-pong
/// round trip ~20% shorter). For the hot parks in headers (channel receive,
/// gen_server call); the rest call park().
[[gnu::always_inline]] inline std::uint32_t park_here(wait_reason why = wait_reason::other) {
#if SMARM_INLINE_PARK
    fiber_transfer to = park_begin(why);
    return park_end(smarm_jump_fcontext(to.ctx, to.data));
#else
    return park_and_reopen(why);
#endif
}
/// Wake `p` if its wait `epoch` is still open. Callable from any thread.
void unpark_at(pid p, std::uint32_t epoch) noexcept;
/// End the open wait without parking (e.g. select found a ready arm while
/// registering): bumps the epoch and eats a notification that already landed.
void retire_wait() noexcept;
/// Is `p`'s wait `epoch` still open (not finished, not superseded)?
bool wait_is_open(pid p, std::uint32_t epoch) noexcept;
/// Observation point: throws smarm::stopped on a pending stop, yields when the
/// timeslice is spent. A no-op outside an actor.
void observe();
/// A send's tail in one runtime entry: unpark_at(p, epoch) when `p` is
/// valid, then observe().
void unpark_then_observe(pid p, std::uint32_t epoch);
/// A receive's head in one runtime entry: observe(), then open_wait(call).
/// No observation point may come between this and the registration.
wait_token observe_and_open(const char* call);
/// Throws smarm::stopped when a stop is pending for the current actor.
void throw_if_stopped();
/// The allocation observation point (alloc_preempt): every
/// runtime_config::alloc_check_interval-th allocation of an actor yields when
/// its timeslice is spent. Never throws smarm::stopped, never switches under
/// a runtime lock or no_preempt.
void alloc_observe() noexcept;
/// Count one received message for the current actor (introspection).
void note_message_received() noexcept;

/// Arm a timer that calls unpark_at(p, epoch) at `deadline`; returns its id.
std::uint64_t arm_wake_timer(clock::time_point deadline, pid p, std::uint32_t epoch);
/// Arm a timer that runs `fire` on a scheduler thread at `deadline`;
/// `wall`: exempt from the causal profiler's virtual-time shift.
std::uint64_t arm_call_timer(clock::time_point deadline, unique_function fire, bool wall = false);
/// Disarm a timer; true if it had not fired yet.
bool disarm_timer(std::uint64_t id) noexcept;

/// The runtime's tick counter (the TSC where there is one): monotonic and
/// far cheaper than reading the clock.
std::uint64_t ticks() noexcept;
/// A coarse ticks() for stamping queued messages: on a scheduler thread its
/// last clock read (at most about a timeslice old), elsewhere ticks().
std::uint64_t queue_stamp() noexcept;
/// The moment a timed wait begins, for deadline_after: ticks(), or under a
/// clock_source its time in nanoseconds (ticks keep real time).
inline std::uint64_t wait_moment() noexcept {
    if (const clock_source* c = clock_override.load(std::memory_order_acquire)) [[unlikely]]
        return static_cast<std::uint64_t>(c->now().time_since_epoch().count());
    return ticks();
}
/// The clock's time `d` after the moment wait_moment() returned `at`
/// (saturating at time_point::max()).
clock::time_point deadline_after(std::uint64_t at, std::chrono::nanoseconds d) noexcept;
/// A deferred wake timer for the current actor's open wait `epoch`, due `d`
/// after ticks() returned `at`. Instead of entering the timer heap now, it
/// is armed by the actor's scheduler when its loop next runs, and only if
/// the wait is still open then (at most a timeslice later; the deadline
/// itself is unchanged). A wait answered before that - a call whose server
/// replies within the same run of direct switches - never touches the heap.
/// Every defer_wake must be paired with end_deferred_wake() once the wait
/// is over (RAII: also on a stop).
void defer_wake(std::uint32_t epoch, std::uint64_t at, std::chrono::nanoseconds d) noexcept;
void end_deferred_wake() noexcept;

}  // namespace smarm::detail
