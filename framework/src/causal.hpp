#pragma once
// The causal profiler's hooks into the switch and the observation point
// (causal.cpp; the model is in include/smarm/causal.hpp). Each hook is one
// relaxed load when idle: detail::hook_causal (sticky once any experiment began, so
// resumes keep forgiving parked actors after a window ends) at switches,
// `experiment` at the observation point's clock read.
//
// Owned by the thread running the actor: slot::causal_site, causal_debt
// and the other slot::causal_* fields, scheduler::causal_mark and
// causal_delay; everything global is a relaxed atomic (the ledgers are
// sums; no other data is published by them).

#include <smarm/causal.hpp>
#include <smarm/detail/hooks.hpp>

#include <atomic>
#include <cstdint>

#include "internal.hpp"
#include "slot_table.hpp"

namespace smarm::internal {

struct scheduler;

namespace causal_hooks {

extern std::atomic<std::uint64_t> experiment;    ///< (site << 32) | pct, 0 = none
extern std::atomic<std::uint64_t> global_delay;  ///< ticks

void sample(scheduler& s, slot& sl) noexcept;
void leaving(scheduler& s, slot& sl, bool park) noexcept;
/// The actor on `s` leaves the site it is in (still recorded in its slot).
void site_exit(scheduler& s, slot& sl) noexcept;
void resumed(scheduler& s, slot& sl, bool after_park) noexcept;
void idle(scheduler& s) noexcept;
void wait_begins(slot& sl) noexcept;
void wait_abandoned(slot& sl) noexcept;

/// Hooks compiled out (-DSMARM_CAUSAL=OFF) fold to nothing.
inline constexpr bool compiled_in = SMARM_CAUSAL_ENABLED != 0;

/// At an observation point's clock read.
[[gnu::always_inline]] inline void on_observe(scheduler& s, slot& sl) noexcept {
    if (compiled_in && experiment.load(std::memory_order_relaxed) != 0) [[unlikely]]
        sample(s, sl);
}
/// The actor on `s` is about to switch out; `park`: it waits for something.
[[gnu::always_inline]] inline void on_leave(scheduler& s, slot& sl, bool park) noexcept {
    if (compiled_in && detail::hooks_on(detail::hook_causal)) [[unlikely]]
        leaving(s, sl, park);
}
/// The actor is back on `s`; `after_park`: it had parked (not yielded).
[[gnu::always_inline]] inline void on_resume(scheduler& s, slot& sl, bool after_park) noexcept {
    if (compiled_in && detail::hooks_on(detail::hook_causal)) [[unlikely]]
        resumed(s, sl, after_park);
}
/// The actor on `s` is about to park on the world outside (IO, the
/// blocking pool): time passed there is not slowed by the experiment, so the
/// actor will owe the delay accrued while it waits. Marked whether or not
/// an experiment runs: one may begin during the wait (found by ctest, where
/// each test is a fresh process and the park came before the first begin).
[[gnu::always_inline]] inline void on_external_wait(slot& sl) noexcept {
    if (compiled_in) {
        sl.causal_external = true;
        sl.causal_ext_base = global_delay.load(std::memory_order_relaxed);
        sl.causal_stamp = 0;
        // In the selected site, the wait is the site's time (wait_begins).
        if (experiment.load(std::memory_order_relaxed) != 0) [[unlikely]]
            wait_begins(sl);
    }
}
/// The external wait is over (whether or not it parked or an experiment
/// ran): a later park on an actor is forgiven again.
[[gnu::always_inline]] inline void end_external_wait(slot& sl) noexcept {
    if (compiled_in) {
        sl.causal_external = false;
        // A wait that never parked was not resumed: it stops counting here.
        if (sl.causal_stamp != 0) [[unlikely]]
            wait_abandoned(sl);
    }
}
/// `s` found nothing to run: an idle core would idle in the sped-up
/// program too, so the delay accrued meanwhile is forgiven (its next work
/// comes from an actor of the same slowed timeline, or from outside, which
/// the woken actor's own debt covers).
[[gnu::always_inline]] inline void on_idle(scheduler& s) noexcept {
    if (compiled_in && detail::hooks_on(detail::hook_causal)) [[unlikely]]
        idle(s);
}

}  // namespace causal_hooks
}  // namespace smarm::internal
