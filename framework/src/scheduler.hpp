#pragma once
// One scheduler thread's state, and how code finds the scheduler it runs on.
//
// A scheduler's fields are written by its own thread only (the actor it runs
// is part of that thread while it runs), except the counters, which other
// threads read relaxed for stats(). The loop that drives it is schedule.cpp.
//
// Thread-locals: the current scheduler is read through current_scheduler(),
// an opaque call, because an actor can resume on another thread after any
// switch and a compiler may otherwise reuse one thread_local read for a
// later one (entry_scheduler() is the one exception, with its rule).

#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <smarm/detail/bump.hpp>

#include "slot_table.hpp"
#include "stack_pool.hpp"
#include "timer_service.hpp"

#include "internal.hpp"

namespace smarm::internal {

class runtime_impl;

/// Why an actor's context switched away from it, as the side that completes
/// the switch (the loop's resume(), or direct_switch_done() on the actor
/// switched to) reads it:
/// - yield:   the slice is spent or yield_now(); Running -> Queued, to the
///            back of the shared queue (never the wake slot). Never direct.
/// - park:    a wait (park_here / park()); park_return() settles Running ->
///            Parked, or requeues at once when a wake raced the park
///            (RunningNotified).
/// - finish:  the body returned or threw; finalize() publishes Done and
///            delivers the end to joiners, monitors and links.
/// - handoff: a work-first spawn; the spawner (Running -> Queued) takes its
///            new child's place in the wake slot and the child runs.
enum class switch_reason { yield, park, finish, handoff };

struct alignas(64) scheduler {
    runtime_impl* rt = nullptr;  // immutable
    unsigned id = 0;             // immutable

    // ---- owner thread only ----
    void* ctx = nullptr;      ///< this thread's fcontext while an actor runs
    slot* current = nullptr;  ///< the actor being run
    std::uint32_t current_gen = 0;
    std::uint64_t slice_end = 0;    ///< tick at which the running slice expires
    std::uint32_t alloc_count = 0;  ///< allocations since the last alloc check
    bool spun = false;              ///< already spun since the last actor ran
    /// This scheduler's current idle-spin length (ticks): halved after a spin
    /// that found nothing, doubled (up to runtime_config::idle_spin) after
    /// one that found work, so the spin is spent only where it pays.
    std::uint64_t spin_budget = 0;
    std::uint64_t next_poll = 0;  ///< tick of the next busy-path netpoll
    /// The tracer (trace.cpp): the tick of the last counter sample, and a
    /// yield_now() in progress (a yield without it was a preemption).
    std::uint64_t trace_sampled = 0;
    bool trace_voluntary = false;

    // Clock reads at observation points (observe.cpp, adapt_obs_period): the
    // current window is obs_period points long, obs_left of them to go.
    std::uint32_t obs_period = obs_period_initial;
    std::uint32_t obs_left = obs_period_initial;
    std::uint64_t obs_mark = 0;  ///< tick of the last clock read (or of the slice's start)
    /// Tick of the causal profiler's last sample of the running actor (0:
    /// unarmed); re-armed at every resume (causal.cpp).
    std::uint64_t causal_mark = 0;
    /// The causal profiler's ledger of this core's timeline (ticks): the
    /// delay it has absorbed (paid, credited by in-site samples, forgiven
    /// while idle). It chases the global ledger; causal.cpp.
    std::uint64_t causal_delay = 0;

    /// The actor whose short period last shortened the window (obs_enter);
    /// credited when the window turns out chatty (adapt_obs_period).
    slot* obs_capper = nullptr;

    /// `next` takes over the running slice (a direct switch, a wake-slot
    /// actor): the clock-read window is shortened so that it ends within
    /// `next`'s own observation period, or an actor that observes rarely
    /// would inherit the long count of a chatty one (observe.cpp,
    /// adapt_obs_period). obs_period stays the window's full length.
    void obs_enter(slot& next) noexcept {
        const std::uint32_t p = next.obs_period.load(std::memory_order_relaxed);
        if (obs_left > p) [[unlikely]] {
            obs_period -= obs_left - p;
            obs_left = p;
            obs_capper = &next;
        }
    }
    /// The actor to run next on this scheduler, before the shared queue
    /// (see runtime_impl::enqueue_from).
    slot* wake_slot = nullptr;
    /// The wake slot, `pops` and the tick at the clock read that first saw
    /// its occupant (runtime_impl::spill_stale_wake_slot): the same occupant
    /// with no pop since has waited that long behind a busy actor.
    slot* wake_seen = nullptr;
    std::uint64_t wake_seen_pops = 0;
    std::uint64_t wake_seen_at = 0;
    switch_reason why = switch_reason::yield;
    /// Direct switches left before the loop must run again (take_direct).
    static constexpr std::uint32_t direct_period = 64;
    std::uint32_t direct_left = direct_period;
    /// Set by an actor that parks straight into the wake-slot actor, read
    /// and cleared by that actor once it runs (fiber.cpp switched_in).
    slot* switched_from = nullptr;
    switch_reason switched_why = switch_reason::park;  ///< why switched_from left
    std::vector<stack_mem> stack_cache;
    std::vector<std::uint32_t> slot_cache;  ///< vacant slot indices
    /// finalize's scratch for an ending actor's monitors and links: swapped
    /// with the slot's lists (under its lock), told, then cleared, so both
    /// buffers keep their capacity (a monitored actor per HTTP connection
    /// allocated its list anew each time).
    std::vector<std::pair<std::uint64_t, sender<down>>> exit_monitors;
    std::vector<pid> exit_links;
    timer_service::local timers;            ///< deferred wakes, due-check, fired scratch
    void* eh_globals = nullptr;             ///< this thread's __cxa_eh_globals
    void* tsan_fiber = nullptr;
    const void* asan_bottom = nullptr;
    std::size_t asan_size = 0;

    // ---- counters (written by the owner, read by stats()) ----
    std::atomic<std::uint64_t> pops{0}, parks{0}, wakes{0}, yields{0}, overruns{0}, spawns{0};
    /// Utilisation (ticks): when the loop started, the time spent idle
    /// spinning and parked, and when the idle spell in progress began (0:
    /// none). Busy is the rest. Read at the idle transitions only.
    std::atomic<std::uint64_t> started{0}, spin_ticks{0}, park_ticks{0}, idle_since{0};
};

/// A scheduler's and an actor's counters have one writer at a time.
using smarm::detail::bump;

/// The scheduler running on this thread (nullptr on other threads).
scheduler* current_scheduler() noexcept;

/// This thread's scheduler (runtime.cpp). constinit: no TLS init wrapper.
extern constinit thread_local scheduler* tl_sched;

/// current_scheduler() without the call, for the message path's entry
/// points (unpark_then_observe, observe_and_open, the park's suspend). An
/// actor's code can resume on another thread after any switch, and the
/// compiler may reuse one thread_local read for a later one when it can see
/// that nothing in between writes the variable: so only read it here *once
/// per function (after inlining), before anything that can switch*, and
/// take the scheduler after a switch from the switch itself or from
/// current_scheduler() (opaque, never reused). The three calls it replaces
/// were ~5% of a message ping-pong.
[[gnu::always_inline]] inline scheduler* entry_scheduler() noexcept {
    return tl_sched;
}
/// The runtime of the calling scheduler, else the most recently started one
/// (nullptr when none).
runtime_impl* active_runtime() noexcept;
/// The scheduler running the calling actor. Throws std::logic_error naming
/// `call` when the caller is not an actor.
scheduler& actor_scheduler(const char* call);
/// active_runtime(), or std::logic_error naming `call` when none runs.
runtime_impl& running_runtime(const char* call);

/// ticks() (detail/wait.hpp) is the process-wide tick source (TSC where
/// available).
/// Ticks per nanosecond, calibrated once.
double ticks_per_ns() noexcept;

}  // namespace smarm::internal
