// Spawn, finish, join: a slot and a stack for a new actor (reserve/commit,
// work-first), its end (finalize: Done, joiners, monitors, links, groups,
// live count last) and the slot's reuse (reclaim).

#include <smarm/detail/assert.hpp>
#include <smarm/detail/wait.hpp>
#include <smarm/runtime.hpp>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

#if SMARM_ASAN
#include <sanitizer/asan_interface.h>
#endif

#include "causal.hpp"
#include "fiber.hpp"
#include "names.hpp"
#include "observe.hpp"
#include "runtime_impl.hpp"
#include "trace_hooks.hpp"

namespace smarm::internal {

spawn_reservation runtime_impl::reserve(std::size_t size, std::size_t align, const task_vtable* vt,
                                        scheduler* on) {
    slot* sl = nullptr;
    if (on != nullptr) {
        if (on->slot_cache.empty()) slots_.allocate_batch(on->slot_cache, 32);
        if (!on->slot_cache.empty()) {
            sl = slots_.at(on->slot_cache.back());
            on->slot_cache.pop_back();
        }
    } else {
        sl = slots_.allocate();
    }
    if (sl == nullptr)
        throw spawn_error("smarm::spawn: the slot table is full (runtime_config.max_actors = " +
                          std::to_string(cfg_.max_actors) + " live actors)");
    // A slot on the free list twice would run two actors under one pid.
    SMARM_INVARIANT(state_word::state_of(sl->word.load()) == actor_state::vacant,
                    "slot_table: a slot handed out while in use");
    stack_mem st;
    if (on != nullptr && !on->stack_cache.empty()) {
        st = on->stack_cache.back();
        on->stack_cache.pop_back();
    } else {
        try {
            st = stacks_.acquire();
        } catch (...) {
            slots_.release(sl->index);
            throw;
        }
    }
#if SMARM_ASAN
    // A reused stack (pool or scheduler cache) still carries the shadow
    // poison of its last actor's frames: a finished actor switches away
    // without returning through them. The task placed at the top would read
    // as an overflow (seen once a supervisor's child closure grew).
    ASAN_UNPOISON_MEMORY_REGION(st.bottom(), st.usable());
#endif
    // The task object lives at the top of the new stack; the fiber's frames
    // start just below it.
    std::size_t a = std::max<std::size_t>(align, 16);
    auto top = reinterpret_cast<std::uintptr_t>(st.top());
    std::uintptr_t storage = (top - size) & ~(std::uintptr_t{a} - 1);
    if (size > st.usable() / 4) {
        stacks_.release(st);
        slots_.release(sl->index);
        throw spawn_error("smarm::spawn: the task object (" + std::to_string(size) +
                          " bytes) exceeds a quarter of the actor stack (" +
                          std::to_string(st.usable()) + " bytes); capture less by value");
    }
    sl->stack = st;
    sl->vt = vt;
    spawn_reservation r;
    r.storage = reinterpret_cast<void*>(storage);
    r.slot = sl;
    r.rt = this;
    r.id = pid{sl->index, state_word::gen_of(sl->word.load())};
    return r;
}

void runtime_impl::abandon(spawn_reservation& r) noexcept {
    slot* sl = r.slot;
    stacks_.release(sl->stack);
    sl->stack = stack_mem{};
    slots_.release(sl->index);
}

void runtime_impl::commit(spawn_reservation& r, pid parent, scheduler* caller) noexcept {
    slot* sl = r.slot;
    sl->task = r.storage;
    fiber_init(*sl, reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(r.storage) &
                                            ~std::uintptr_t{15}));
    sl->stop_for.store(0, std::memory_order_relaxed);
    sl->refs.store(2, std::memory_order_relaxed);  // alive + the handle
    sl->overruns.store(0, std::memory_order_relaxed);
    sl->messages.store(0, std::memory_order_relaxed);
    sl->cpu_ticks.store(0, std::memory_order_relaxed);
    sl->no_preempt = 0;
    sl->pg_member = false;
    sl->set_end_kind(exit_kind::exit);
    sl->obs_period.store(obs_period_initial, std::memory_order_relaxed);
    sl->end_error = nullptr;
    sl->causal_site = 0;
    sl->causal_handoff = 0;
    sl->causal_external = false;
    sl->causal_debt = 0;  // born owing nothing
    // No cold lock: nobody looks at the slot before word.spawn() publishes it
    // (release); introspection reads `parent` only after seeing it live.
    sl->parent = parent;
    live_.fetch_add(1, std::memory_order_acq_rel);  // before the enqueue (verdict)
    bump((caller != nullptr && caller->rt == this ? *caller : scheds_[0]).spawns);
    trace_hooks::event(trace_hooks::kind::spawn, trace_hooks::word(pid{sl->index, r.id.generation}),
                       trace_hooks::word(parent));
    sl->word.spawn(r.id.generation);
    enqueue_from(caller, *sl);
}

void runtime_impl::finalize(scheduler& s, slot& sl) {
    fiber_destroy(sl);
    if (s.stack_cache.size() < 64)
        s.stack_cache.push_back(sl.stack);
    else
        stacks_.release(sl.stack);
    sl.stack = stack_mem{};
    // Not s.current_gen: a direct switch finalizes on the next actor's turn.
    pid me{sl.index, state_word::gen_of(sl.word.load())};
    trace_hooks::event(trace_hooks::kind::exit, trace_hooks::word(me), 0, 0,
                       static_cast<std::uint8_t>(sl.end_kind()));
    {
        std::unique_lock g(sl.cold_mu);
        sl.word.finish();
        // The common end skips the hand-over: no tenant of this slot was ever
        // joined while running, monitored or linked (the extension, once
        // made, stays with the slot and is only emptied by reclaim).
        if (sl.ext) {
            std::vector<std::pair<pid, std::uint32_t>> joiners;
            auto& monitors = s.exit_monitors;  // empty: cleared after each use
            auto& links = s.exit_links;
            joiners.swap(sl.ext->joiners);
            monitors.swap(sl.ext->monitors);
            links.swap(sl.ext->links);
            sl.ext->trap.reset();
            g.unlock();
            for (auto& [p, e] : joiners)
                unpark_at(p, e, &s);
            // Monitors and links are told before live_ drops (their wakes
            // count).
            if (!monitors.empty() || !links.empty())
                notify_exit(*this, s, me, sl.end_kind(), sl.end_error, monitors, links);
            monitors.clear();
            links.clear();
            // A slot gets this buffer next: never a huge one.
            if (monitors.capacity() > 64) monitors = {};
            if (links.capacity() > 64) links = {};
        }
    }
    if (sl.pg_member) {
        sl.pg_member = false;
        groups_->evict(me);
    }
    if (me == root_) root_exited_.store(true, std::memory_order_release);
    if (sl.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) reclaim(sl);
    // Last: every wake this finalize produced is already enqueued.
    live_.fetch_sub(1, std::memory_order_acq_rel);
}

void runtime_impl::reclaim(slot& sl) noexcept {
    {
        std::lock_guard g(sl.cold_mu);
        sl.end_error = nullptr;
        if (sl.ext) {
            // finalize moved the lists out; what is left is capacity.
            sl.ext->monitors.clear();
            sl.ext->links.clear();
            sl.ext->trap.reset();
            sl.ext->joiners.clear();
        }
        sl.parent = pid{};
        sl.word.reclaim();
    }
    scheduler* s = current_scheduler();
    if (s != nullptr && s->rt == this) {
        s->slot_cache.push_back(sl.index);
        if (s->slot_cache.size() > 128) slots_.release_batch(s->slot_cache, 64);
    } else {
        slots_.release(sl.index);
    }
}

void runtime_impl::release_handle(pid p) noexcept {
    slot* sl = slots_.at(p.index);
    if (sl != nullptr && sl->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) reclaim(*sl);
}

outcome runtime_impl::join(pid p) {
    auto [s, self] = actor_or_throw("smarm::join_handle::join");
    const pid me{self->index, s->current_gen};
    if (me == p)
        throw std::logic_error("smarm::join_handle::join: actor " + p.to_string() +
                               " cannot join itself");
    // The handle holds a reference, so the slot is still p's.
    slot* sl = slots_.at(p.index);
    observe_on(s);
    // Done already (the common case once a child ran): the acquire load
    // pairs with finish()'s release, which came after end_kind/end_error
    // were written, and nobody writes them again while a handle lives.
    if (state_word::state_of(sl->word.load()) == actor_state::done)
        return outcome{sl->end_kind(), sl->end_error};
    for (;;) {
        {
            std::lock_guard g(sl->cold_mu);
            std::uint64_t w = sl->word.load();
            if (state_word::state_of(w) == actor_state::done)
                return outcome{sl->end_kind(), sl->end_error};
            sl->ext_make().joiners.emplace_back(me, begin_wait());
        }
        park(wait_reason::join);
    }
}

// ---- runtime.hpp detail hooks ----

}  // namespace smarm::internal

namespace smarm::detail {

using namespace smarm::internal;

spawn_reservation spawn_reserve(std::size_t size, std::size_t align, const task_vtable* vt) {
    scheduler* s = observe_on(actor_or_throw("smarm::spawn").s);  // it may have moved us
    return s->rt->reserve(size, align, vt, s);
}

void spawn_abandon(spawn_reservation& r) noexcept {
    r.rt->abandon(r);
}

void spawn_commit(spawn_reservation& r) noexcept {
    runtime_impl* rt = r.rt;
    scheduler* s = current_scheduler();
    rt->commit(
        r, s != nullptr && s->current != nullptr ? pid{s->current->index, s->current_gen} : pid{},
        s);
    if (s != nullptr && s->current != nullptr && s->current->no_preempt == 0 &&
        s->wake_slot == r.slot)
        fiber_suspend(switch_reason::handoff);
}

void release_handle(runtime_impl* rt, pid p) noexcept {
    rt->release_handle(p);
}

outcome join_actor(runtime_impl* rt, pid p) {
    return rt->join(p);
}

}  // namespace smarm::detail
