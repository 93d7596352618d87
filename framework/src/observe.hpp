#pragma once
// Observation points: where a running actor may take a pending stop or give
// up a spent timeslice. observe_on is inline (the message path passes here
// twice per message); its clock read and the preemption are observe.cpp.
//
// An actor under no_preempt (or unwinding: uncaught_exceptions() != 0)
// never throws `stopped` here; under no_preempt it never yields either.

#include <exception>

#include <smarm/runtime.hpp>

#include "scheduler.hpp"

#include "internal.hpp"

namespace smarm::internal {

struct actor_ctx {
    scheduler* s;
    slot* sl;
};
/// The calling actor and its scheduler; std::logic_error naming `call`
/// outside an actor.
inline actor_ctx actor_or_throw(const char* call) {
    scheduler& s = actor_scheduler(call);
    return {&s, s.current};
}
inline bool may_throw_stop(slot& sl, std::uint32_t gen) noexcept {
    return sl.no_preempt == 0 && sl.stop_pending(gen) && std::uncaught_exceptions() == 0;
}

/// observe_on's clock read (every obs_period-th point): adapts the period,
/// yields when the slice is spent. Returns the scheduler running the actor
/// afterwards.
scheduler* observe_clock(scheduler* s, slot& sl);

/// The observation point for the actor running on `s`; returns the scheduler
/// running it afterwards (another one if it yielded and migrated).
[[gnu::always_inline]] inline scheduler* observe_on(scheduler* s) {
    if (s == nullptr || s->current == nullptr) return s;
    slot& sl = *s->current;
    if (sl.no_preempt != 0) return s;
    if (may_throw_stop(sl, s->current_gen)) [[unlikely]]
        throw stopped{};
    // The clock is read at every obs_period-th observation point only
    // (observe.cpp): a spent slice is noticed about a 32nd of a slice late
    // at most, for actors whose observation points keep a steady pace.
    if (--s->obs_left != 0) [[likely]]
        return s;
    return observe_clock(s, sl);
}

}  // namespace smarm::internal
