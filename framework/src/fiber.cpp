#include "fiber.hpp"

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/wait.hpp>

#include <boost/context/detail/fcontext.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>

#if SMARM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if SMARM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#include "causal.hpp"
#include "trace_hooks.hpp"

namespace bctx = boost::context::detail;

// libstdc++/libsupc++ per-thread exception state. Declared here (cxxabi.h
// declares it `const`, which would let the compiler cache it across a switch).
namespace __cxxabiv1 {
struct __cxa_eh_globals;
extern "C" __cxa_eh_globals* __cxa_get_globals() noexcept;
}  // namespace __cxxabiv1

namespace smarm::internal {

namespace {

// The observers' hooks at a switch (the causal profiler's, the tracer's):
// one relaxed load for all of them while none watches.
[[gnu::always_inline]] inline bool switch_watched() noexcept {
    if constexpr (!causal_hooks::compiled_in && !trace_hooks::compiled_in) return false;
    return detail::hook_bits.load(std::memory_order_relaxed) != 0;
}
[[gnu::always_inline]] inline void resumed_hooks(scheduler& s, slot& sl, bool after_park) noexcept {
    if (switch_watched()) [[unlikely]] {
        causal_hooks::on_resume(s, sl, after_park);
        trace_hooks::on_resume(s, sl);
    }
}

[[gnu::always_inline]] inline bctx::transfer_t jump(bctx::fcontext_t to, void* data) noexcept {
#if SMARM_INLINE_PARK
    fiber_transfer t = smarm_jump_fcontext(to, data);
    return {t.ctx, t.data};
#else
    return bctx::jump_fcontext(to, data);
#endif
}

struct eh_globals {
    void* caught;
    unsigned int uncaught;
};

// noipa, not just noinline: GCC infers `const` through IPA and would reuse the
// previous thread's pointer after a switch that migrated the actor.
SMARM_OPAQUE_CALL eh_globals* thread_eh() noexcept {
    return reinterpret_cast<eh_globals*>(__cxxabiv1::__cxa_get_globals());
}

// The scheduler caches its thread's eh-globals pointer (fiber_thread_init),
// so a switch costs two plain copies instead of two TLS lookups.
void save_eh(scheduler* s, slot& sl) noexcept {
    auto* g = static_cast<eh_globals*>(s->eh_globals);
    sl.eh_caught = g->caught;
    sl.eh_uncaught = g->uncaught;
    g->caught = nullptr;
    g->uncaught = 0;
}

void restore_eh(scheduler* s, slot& sl) noexcept {
    auto* g = static_cast<eh_globals*>(s->eh_globals);
    g->caught = sl.eh_caught;
    g->uncaught = sl.eh_uncaught;
}

// Runs first thing on `sl`'s stack after any switch into it. `t.fctx` is the
// context of whoever jumped here: the scheduler's, or (a direct switch) the
// actor that switched out in favour of `sl`, recorded in s->switched_from.
// That actor's context is stored before anything can make it runnable again
// (or, when it finished, before its stack is recycled).
[[gnu::always_inline]] inline void switched_in(bctx::transfer_t t, slot& sl) noexcept {
    auto* s = static_cast<scheduler*>(t.data);
    slot* from = s->switched_from;
#if SMARM_ASAN
    // Only a switch from the scheduler records its stack (to switch back).
    if (from == nullptr)
        __sanitizer_finish_switch_fiber(sl.asan_fake_stack, &s->asan_bottom, &s->asan_size);
    else
        __sanitizer_finish_switch_fiber(sl.asan_fake_stack, nullptr, nullptr);
#endif
    restore_eh(s, sl);
    if (from == nullptr) {
        s->ctx = t.fctx;
    } else {
        s->switched_from = nullptr;
        from->ctx = t.fctx;
        s->rt->direct_switch_done(*s, *from, s->switched_why);
    }
}

[[noreturn]] void actor_entry(bctx::transfer_t t) noexcept {
    slot& sl = *static_cast<scheduler*>(t.data)->current;
    switched_in(t, sl);
    resumed_hooks(*static_cast<scheduler*>(t.data), sl, false);
    try {
        sl.vt->invoke(sl.task);
        sl.set_end_kind(exit_kind::exit);
    } catch (const stopped&) {
        sl.set_end_kind(exit_kind::stopped);
    } catch (...) {
        sl.set_end_kind(exit_kind::panic);
        sl.end_error = std::current_exception();
    }
    // The task's destructor may call runtime functions; the actor is ending,
    // so it must not be stopped again from inside a destructor.
    sl.stop_for.store(0, std::memory_order_relaxed);
    sl.vt->destroy(sl.task);
    fiber_suspend(switch_reason::finish);
    std::fputs("smarm: a finished actor was resumed (runtime corrupt)\n", stderr);
    std::abort();
}

}  // namespace

void fiber_init(slot& sl, char* sp) {
    std::size_t size = static_cast<std::size_t>(sp - sl.stack.bottom());
    sl.ctx = bctx::make_fcontext(sp, size, &actor_entry);
    sl.eh_caught = nullptr;
    sl.eh_uncaught = 0;
    sl.asan_fake_stack = nullptr;
#if SMARM_TSAN
    sl.tsan_fiber = __tsan_create_fiber(0);
#endif
}

void fiber_destroy(slot& sl) noexcept {
#if SMARM_TSAN
    if (sl.tsan_fiber) __tsan_destroy_fiber(sl.tsan_fiber);
#endif
    sl.tsan_fiber = nullptr;
    sl.ctx = nullptr;
}

void fiber_thread_init(scheduler& s) noexcept {
    s.eh_globals = thread_eh();
#if SMARM_TSAN
    s.tsan_fiber = __tsan_get_current_fiber();
#else
    (void)s;
#endif
}

switch_reason fiber_resume(scheduler& s, slot& sl) noexcept {
#if SMARM_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, sl.stack.bottom(), sl.stack.usable());
#endif
#if SMARM_TSAN
    __tsan_switch_to_fiber(sl.tsan_fiber, 0);
#endif
    bctx::transfer_t t = jump(sl.ctx, &s);
#if SMARM_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    // Not necessarily `sl`: it may have parked in favour of a wake-slot
    // actor (a direct switch), which is the one coming back now.
    s.current->ctx = t.fctx;
    return s.why;
}

namespace {
// Everything before the jump that leaves `sl`: where to, and the scheduler
// to hand over with the transfer.
struct leaving {
    bctx::fcontext_t to;
    scheduler* s;
};
[[gnu::always_inline]] inline leaving leave(scheduler* s, slot& sl, switch_reason why,
                                            detail::wait_reason wr = detail::wait_reason::other,
                                            std::uint32_t arg = 0) noexcept {
    // First, and read back by the hooks: `wr` kept live across their cold
    // call cost a park five instructions (register spills).
    sl.wait_why.store(static_cast<std::uint8_t>(wr), std::memory_order_relaxed);
    if (switch_watched()) [[unlikely]] {
        causal_hooks::on_leave(*s, sl, why == switch_reason::park);
        trace_hooks::on_leave(
            *s, sl, why,
            static_cast<detail::wait_reason>(sl.wait_why.load(std::memory_order_relaxed)), arg);
    }
    save_eh(s, sl);
    // Yields go behind everyone else, so only parks, handoffs (the new
    // child sits in the wake slot) and finishes switch directly.
    if (slot* next = why != switch_reason::yield ? s->rt->take_direct(*s) : nullptr) {
        // Direct switch: run the wake-slot actor without a round trip
        // through the scheduler loop; it completes our switch (switched_in)
        // once our context is saved.
        s->switched_from = &sl;
        s->switched_why = why;
#if SMARM_ASAN
        __sanitizer_start_switch_fiber(why == switch_reason::finish ? nullptr : &sl.asan_fake_stack,
                                       next->stack.bottom(), next->stack.usable());
#endif
#if SMARM_TSAN
        __tsan_switch_to_fiber(next->tsan_fiber, 0);
#endif
        return {next->ctx, s};
    }
    s->why = why;
#if SMARM_ASAN
    __sanitizer_start_switch_fiber(why == switch_reason::finish ? nullptr : &sl.asan_fake_stack,
                                   s->asan_bottom, s->asan_size);
#endif
#if SMARM_TSAN
    __tsan_switch_to_fiber(s->tsan_fiber, 0);
#endif
    return {s->ctx, s};
}

// fiber_suspend's body, inlined into the park entry points below (the
// message path parks through them: one call fewer per switch).
[[gnu::always_inline]] inline slot& suspend(switch_reason why,
                                            detail::wait_reason wr = detail::wait_reason::other,
                                            std::uint32_t arg = 0) noexcept {
    // The only read (entry_scheduler's rule): after the switch the
    // scheduler comes with the transfer (switched_in).
    scheduler* s = entry_scheduler();
    slot& sl = *s->current;
    leaving l = leave(s, sl, why, wr, arg);
    bctx::transfer_t t = jump(l.to, l.s);
    // Resumed, possibly by another scheduler thread.
    switched_in(t, sl);
    resumed_hooks(*static_cast<scheduler*>(t.data), sl, why == switch_reason::park);
    return sl;
}
}  // namespace

slot& fiber_suspend(switch_reason why) noexcept {
    return suspend(why);
}

// The wait protocol's parks (detail/wait.hpp) live here so the switch is
// inlined into them.

namespace {
// Every park's tail, on the resumed side: a pending stop is thrown here.
// stop_for is 0 unless some stop was requested for this slot's current or
// an earlier tenant: one relaxed load on the common path.
[[gnu::always_inline]] inline slot& parked(slot& sl) {
    if (sl.stop_for.load(std::memory_order_relaxed) != 0) throw_if_stopped();
    return sl;
}
}  // namespace

}  // namespace smarm::internal

namespace smarm::detail {

using namespace smarm::internal;

void park(wait_reason why, std::uint32_t arg) {
    parked(suspend(switch_reason::park, why, arg));
}

std::uint32_t park_and_reopen(wait_reason why) {
    return parked(suspend(switch_reason::park, why)).word.begin_wait();
}

#if SMARM_INLINE_PARK
fiber_transfer park_begin(wait_reason why) noexcept {
    scheduler* s = entry_scheduler();
    leaving l = leave(s, *s->current, switch_reason::park, why);
    return {l.to, l.s};
}

std::uint32_t park_end(fiber_transfer from) {
    auto* s = static_cast<scheduler*>(from.data);
    // Whoever resumed us made us current first (make_current).
    slot& sl = *s->current;
    switched_in({from.ctx, from.data}, sl);
    resumed_hooks(*s, sl, true);
    return parked(sl).word.begin_wait();
}
#endif

}  // namespace smarm::detail
