// The scheduler loop: each turn runs the timer duties, pops (wake slot,
// then the shared queue) and runs what it popped; with nothing to pop it
// judges the run (over / root drain / go on), spins, then parks. The design
// note is runtime_impl.hpp; the termination verdict is judge(), read once
// with acquire loads before spinning and again, seq_cst, as the park's
// re-check (coordinator.hpp: the Dekker pair with every producer).

#include <smarm/detail/spinlock.hpp>

#include <algorithm>
#include <optional>

#include "causal.hpp"
#include "fiber.hpp"
#include "io_driver.hpp"
#include "runtime_impl.hpp"
#include "trace_hooks.hpp"

namespace smarm::internal {

runtime_impl::verdict runtime_impl::judge(std::uint32_t io, std::memory_order mo) const noexcept {
    // live_ drops last in finalize, after every wake it produced: zero live
    // actors with nothing queued and no IO in flight means nothing can run.
    if (live_.load(mo) == 0 && io == 0) return verdict::over;
    // Root drain: the root is gone and nothing that could wake anyone (a
    // timer, IO) is pending: the parked-forever rest is stopped once.
    if (root_exited_.load(mo) && !root_swept_.load(mo) && timers_.none_pending(mo) &&
        io_in_flight(mo) == 0)
        return verdict::drain;
    return verdict::go_on;
}

void runtime_impl::schedule_loop(scheduler& s) {
    tl_sched = &s;
    s.started.store(ticks(), std::memory_order_relaxed);
    fiber_thread_init(s);
    s.timers.reserve();
    for (;;) {
        timers_.turn(s, s.timers);
        trace_hooks::on_loop(s);
        if (s.wake_slot != nullptr) {
            run_turn(s, std::exchange(s.wake_slot, nullptr), true);
            continue;
        }
        // IO liveness is read before the pop: a completion makes its actor
        // runnable through an enqueue the pop below would see.
        const std::uint32_t io = io_in_flight(std::memory_order_acquire);
        if (busy_poll(s, io)) continue;
        std::uint32_t idx;
        if (queue_.pop(idx)) {
            run_turn(s, slots_.at(idx), false);
            continue;
        }
        switch (judge(io, std::memory_order_acquire)) {
            case verdict::over:
                end_run();
                tl_sched = nullptr;
                return;
            case verdict::drain:
                if (!root_swept_.exchange(true)) stop_all_live();
                continue;
            case verdict::go_on:
                break;
        }
        causal_hooks::on_idle(s);
        // Utilisation: two clock reads per idle spell (never on the busy
        // path). idle_since lets a reader count a spell still in progress.
        const std::uint64_t t0 = ticks();
        s.idle_since.store(t0, std::memory_order_relaxed);
        const bool found = idle_spin(s);
        const std::uint64_t t1 = ticks();
        bump(s.spin_ticks, t1 - t0);
        if (!found) {
            park_idle(s);
            bump(s.park_ticks, ticks() - t1);
        }
        s.idle_since.store(0, std::memory_order_relaxed);
        causal_hooks::on_idle(s);  // the time spun or parked is idle too
    }
}

void runtime_impl::run_turn(scheduler& s, slot* next, bool from_wake_slot) {
    s.spun = false;
    s.direct_left = scheduler::direct_period;
    // Chain rule: surplus work and an idle sibling => wake one.
    if (!queue_.empty()) coord_.wake_one_if_idle();
    while (next != nullptr) {
        next = resume(s, *next, from_wake_slot);
        from_wake_slot = true;
    }
}

bool runtime_impl::busy_poll(scheduler& s, std::uint32_t io) {
    // Harvest ready sockets here every poll period rather than leaving them
    // to the epoll thread, which would need a CPU of its own.
    if (io == 0 || io_fd_waiters.load(std::memory_order_relaxed) == 0) return false;
    const std::uint64_t now = ticks();
    if (now < s.next_poll) return false;
    s.next_poll = now + busy_poll_ticks_;
    return io_->poll(&s) != 0 && s.wake_slot != nullptr;
}

bool runtime_impl::idle_spin(scheduler& s) {
    // Work from the IO thread, the pool or a sibling often lands within
    // microseconds, and picking it up here saves a futex sleep + wake on
    // both sides. The idle bit is not published while spinning, so
    // producers count us as awake and leave the work to us. The spin also
    // polls epoll (without blocking), so a reply to the actor that just
    // parked on a socket is taken here instead of through the epoll thread
    // and a futex wake (Go's idle-P netpoll; the two-thread hop cost ~100 us
    // per round trip on a 2-vCPU VM).
    // Over the awake cap, or no idle core to spin on (other processes hold
    // the cores, core_share.hpp): park at once.
    if (spin_ticks_ == 0 || s.spun || coord_.over_cap() ||
        !spin_allowed_.load(std::memory_order_relaxed)) {
        s.spun = false;
        return false;
    }
    s.spun = true;
    if (s.spin_budget == 0) s.spin_budget = spin_ticks_;
    const std::uint64_t until = ticks() + s.spin_budget;
    std::uint64_t next_poll = 0;
    bool found = false;
    for (;;) {
        if (!queue_.empty() || s.wake_slot != nullptr) {
            found = true;
            break;
        }
        const std::uint64_t now = ticks();
        if (now >= until) break;
        // The clock and epoll are read every poll period, not every
        // iteration (clock_gettime was 6% of a busy server's CPU when read
        // on every turn).
        if (now >= next_poll) {
            next_poll = now + poll_ticks_;
            if (timers_.due() ||
                (io_fd_waiters.load(std::memory_order_relaxed) != 0 && io_->poll(&s) != 0)) {
                found = true;
                break;
            }
        }
        cpu_relax();
    }
    s.spin_budget = found ? std::min(s.spin_budget * 2, spin_ticks_)
                          : std::max(s.spin_budget / 2, spin_ticks_ / 32);
    return true;
}

void runtime_impl::park_idle(scheduler& s) {
    const std::optional<clock::time_point> tk = timers_.claim_timekeeper(s.id);
    bump(s.parks);
    const park_result r = coord_.park(s.id, tk, [&] {
        // Our idle bit is published: if we are the last one, the epoll
        // thread must take over blocking in epoll_wait.
        io_->scheduler_idle();
        return !queue_.empty() ||
               judge(io_in_flight(std::memory_order_seq_cst), std::memory_order_seq_cst) !=
                   verdict::go_on ||
               timers_.due();
    });
    if (r != park_result::work_found) bump(s.wakes);
    if (tk) timers_.end_timekeeping(s, s.timers, s.id);
}

void runtime_impl::end_run() noexcept {
    timers_.clear();
    coord_.wake_all();
}

slot* runtime_impl::resume(scheduler& s, slot& sl, bool from_wake_slot) {
    // A wake-slot actor inherits the running slice (see the design note); if
    // that slice is spent, its first observation point yields.
    if (!from_wake_slot) {
        const std::uint64_t now = ticks();
        s.slice_end = now + slice_ticks_;
        s.obs_mark = now;
        s.obs_period = s.obs_left = sl.obs_period.load(std::memory_order_relaxed);
        s.obs_capper = nullptr;
    }
    make_current(s, sl);
    switch_reason why = fiber_resume(s, sl);
    // The actor that came back: `sl`, or one it switched to directly.
    slot& back = *s.current;
    s.current = nullptr;
    switch (why) {
        case switch_reason::yield:
            back.word.yield_return();
            // Yielders go behind everyone else, never into the wake slot.
            enqueue_shared(back.index);
            break;
        case switch_reason::park:
            // RunningNotified => the wake raced the park: requeue at once.
            if (!back.word.park_return()) enqueue_from(&s, back);
            break;
        case switch_reason::finish:
            finalize(s, back);
            break;
        case switch_reason::handoff:
            // The spawner yields to its new child, which sits in the wake
            // slot; the spawner takes the child's place there.
            back.word.yield_return();
            return std::exchange(s.wake_slot, &back);
    }
    return nullptr;
}

void runtime_impl::direct_switch_done_slow(scheduler& s, slot& from, switch_reason why) noexcept {
    switch (why) {
        case switch_reason::handoff:
            // The spawner takes its child's place in the (now empty) wake slot.
            from.word.yield_return();
            enqueue_from(&s, from);
            break;
        case switch_reason::finish: {
            slot& running = *s.current;
            ++running.no_preempt;
            finalize(s, from);
            --running.no_preempt;
            break;
        }
        case switch_reason::park:   // inline (direct_switch_done)
        case switch_reason::yield:  // never direct
            break;
    }
}

void runtime_impl::enqueue(slot& sl) noexcept {
    enqueue_from(current_scheduler(), sl);
}

void runtime_impl::enqueue_shared(std::uint32_t idx) noexcept {
    queue_.push(idx);
    coord_.wake_one_if_idle();
}

void runtime_impl::spill_stale_wake_slot(scheduler& s, std::uint64_t now) noexcept {
    // `pops` unchanged => no actor was made current here since the last
    // read, so the wake slot was never taken: an equal pointer is the same
    // occupant, queued all that time (or, rarely, one displaced to the
    // shared queue, run elsewhere and woken here again: spilling it early
    // only sends it where a sibling may take it). A 16th of a slice: a
    // chatty actor reads the clock every few microseconds, and a ring whose
    // actors forward a few queued tokens each would otherwise spill (and
    // wake a sibling) on every burst: -33% hops/s in BM_ring_scaling/8.
    const std::uint64_t pops = s.pops.load(std::memory_order_relaxed);
    if (s.wake_slot == s.wake_seen && pops == s.wake_seen_pops) {
        if (now - s.wake_seen_at < slice_ticks_ / 16) return;
        slot* stale = std::exchange(s.wake_slot, nullptr);
        s.wake_seen = nullptr;
        queue_.push(stale->index);
        coord_.wake_one_if_idle(/*past_cap=*/true);  // it waited: past a moved cap
        return;
    }
    s.wake_seen = s.wake_slot;
    s.wake_seen_pops = pops;
    s.wake_seen_at = now;
}

bool runtime_impl::request_stop(pid p) noexcept {
    slot* sl = slots_.at(p.index);
    if (sl == nullptr || !sl->holds(p)) return false;
    // Keyed by generation: if the slot was re-tenanted meanwhile, the flag
    // does not match the new tenant and the wake below fails its gen check.
    sl->stop_for.store((std::uint64_t{1} << 32) | p.generation, std::memory_order_release);
    if (sl->word.stop_wake(p.generation)) enqueue(*sl);
    return true;
}

void runtime_impl::stop_all_live() noexcept {
    const std::size_t n = slots_.high_water();
    for (std::size_t i = 0; i < n; ++i) {
        slot* sl = slots_.at(static_cast<std::uint32_t>(i));
        std::uint64_t w = sl->word.load();
        auto st = state_word::state_of(w);
        if (st != actor_state::vacant && st != actor_state::done)
            request_stop(pid{static_cast<std::uint32_t>(i), state_word::gen_of(w)});
    }
}

}  // namespace smarm::internal
