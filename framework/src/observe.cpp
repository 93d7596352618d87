// Observation points and preemption (observe.hpp): the adaptive clock read,
// the yield of a spent slice, the allocation observation point.

#include "observe.hpp"

#include <smarm/detail/wait.hpp>

#include <algorithm>

#include "causal.hpp"
#include "fiber.hpp"
#include "runtime_impl.hpp"

namespace smarm::internal {

namespace {

// Sets how many observation points pass before the next clock read, so that
// reads come about every 32nd of a slice: a clock read (rdtsc, ~10 ns on the
// VMs measured) every 8th observation point was ~5% of a message ping-pong,
// while an actor that observes only every few hundred microseconds overran
// its slice by 8 of those gaps. The window just measured (`took` ticks over
// s.obs_period points) doubles the period when it was shorter than a 64th of
// a slice (up to obs_period_max) and shrinks it to the measured pace when it
// was longer than a 16th. The result is kept in the actor's slot, so a fresh
// slice starts from what suits the actor it runs. Within a slice handed on
// by direct switches the actors share one count, cut short by any actor
// entered whose own period is shorter (scheduler::obs_enter); a chatty
// window credits that actor too, or in a ping-pong whose reads always land
// on the same side the other side's period would never grow back.
void adapt_obs_period(scheduler& s, slot& sl, std::uint64_t now) noexcept {
    const std::uint64_t took = now - s.obs_mark;
    const std::uint64_t slice = s.rt->slice_ticks();
    std::uint32_t p = s.obs_period;
    if (took < slice / 64) {
        p = std::min<std::uint32_t>(p * 2, obs_period_max);
        if (s.obs_capper != nullptr)
            s.obs_capper->obs_period.store(static_cast<std::uint8_t>(p), std::memory_order_relaxed);
    } else if (took > slice / 16) {
        const std::uint64_t per_point = std::max<std::uint64_t>(took / p, 1);
        p = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(slice / 32 / per_point, 1, p));
    }
    s.obs_capper = nullptr;
    s.obs_mark = now;
    s.obs_period = p;
    s.obs_left = p;
    sl.obs_period.store(static_cast<std::uint8_t>(p), std::memory_order_relaxed);
}

}  // namespace

[[gnu::noinline]] scheduler* observe_clock(scheduler* s, slot& sl) {
    causal_hooks::on_observe(*s, sl);  // may pay debt: before the slice is judged
    const std::uint64_t now = ticks();
    bump(sl.cpu_ticks, now - s->obs_mark);  // before adapt moves the mark
    adapt_obs_period(*s, sl, now);
    if (s->wake_slot != nullptr) s->rt->spill_stale_wake_slot(*s, now);
    if (now < s->slice_end) return s;
    if (now - s->slice_end >= s->rt->slice_ticks()) {
        bump(s->overruns);
        bump(sl.overruns);
    }
    bump(s->yields);
    fiber_suspend(switch_reason::yield);
    throw_if_stopped();
    return current_scheduler();
}

}  // namespace smarm::internal

namespace smarm::detail {

using namespace smarm::internal;

void throw_if_stopped() {
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr) return;
    if (may_throw_stop(*s->current, s->current_gen)) throw stopped{};
}

void observe() {
    observe_on(current_scheduler());
}

unsigned& runtime_lock_depth() noexcept {
    thread_local unsigned depth = 0;
    return depth;
}

void alloc_observe() noexcept {
    if (runtime_lock_depth() != 0) return;
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr) return;
    const std::uint32_t every = s->rt->config().alloc_check_interval;
    if (every == 0 || ++s->alloc_count < every) return;
    s->alloc_count = 0;
    if (s->current->no_preempt != 0 || ticks() < s->slice_end) return;
    bump(s->yields);
    fiber_suspend(switch_reason::yield);
}

}  // namespace smarm::detail
