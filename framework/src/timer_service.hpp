#pragma once
// The runtime's timers: every rule about when a timer enters the heap, who
// fires it and who sleeps until it is due lives here.
//
// Owns the one indexed heap (timer_heap.hpp), the spinlock guarding it (a
// spinlock, not a mutex: sections are short, and alloc_preempt must not
// yield inside one), the pending count the termination verdict reads, and
// the coordinator's deadline bookkeeping (the earliest-deadline snapshot and
// the timekeeper role, coordinator.hpp), which change only under that lock.
//
// Deferred wakes: a timed wait records its timer in the actor's slot
// (slot::deferred_wake) and on its scheduler's `deferred` list instead of
// entering the heap; the scheduler arms it at the top of its next loop turn,
// only if the wait is still open. A call answered within one run of direct
// switches never touches the heap.
//
//   deferred_wake::state  none --defer--> deferred --arm--> armed
//                          ^                 |                |
//                          +---- end (actor, any state) ------+
// The actor writes `deferred` and `none`; a scheduler writes `armed`, and
// only over `deferred` of the same generation. All under slot::dwake.mu.
//
// Firing: a due-check on the busy path (one relaxed load while no deadline
// exists, the clock at most once per due_check period otherwise) and the
// timekeeper after its park. Due wake timers go through the shared queue
// when several fire together (the wake slot is LIFO: they would run in
// reverse deadline order), a single one through the firing scheduler's
// wake slot. A call timer's thunk runs on the firing scheduler; an
// exception from it is reported on stderr and dropped.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/unique_function.hpp>
#include <smarm/detail/wait.hpp>
#include <smarm/pid.hpp>

#include "coordinator.hpp"
#include "timer_heap.hpp"

#include "internal.hpp"

namespace smarm::internal {

class runtime_impl;
struct scheduler;
struct slot;
class slot_table;

class timer_service {
  public:
    /// What a scheduler keeps for the timer service (scheduler::timers).
    /// Owner thread only.
    struct local {
        std::vector<timer_heap::fired> fired;  ///< scratch for fire_due
        /// (slot, generation) of actors that deferred a wake while running
        /// here. Capacity is reserved up front (reserve()): an actor pushes
        /// without allocating, and arms at once when it is full.
        std::vector<std::pair<std::uint32_t, std::uint32_t>> deferred;
        std::uint64_t next_due_check = 0;  ///< tick of the next busy-path due-check
        /// Timers fired by this scheduler (stats(); written by the owner).
        std::atomic<std::uint64_t> fires{0};
        void reserve() { deferred.reserve(256); }
    };

    /// `rt` is the owner: a due wake timer is delivered through its
    /// unpark_at (inline there, on the firing path).
    timer_service(runtime_impl& rt, coordinator& coord, slot_table& slots,
                  std::uint64_t due_check_ticks) noexcept;

    // ---- arming (any thread) ----
    /// `wall`: anchored to wall time, never shifted by causal virtual time
    /// (timer_heap.hpp); otherwise stamped with the global delay ledger.
    std::uint64_t arm_wake(clock::time_point deadline, pid p, std::uint32_t epoch,
                           bool wall = false);
    std::uint64_t arm_call(clock::time_point deadline, unique_function fn, bool wall = false);
    /// True when the timer had not fired yet (it now never will).
    bool disarm(std::uint64_t id) noexcept;

    // ---- deferred wakes ----
    /// The actor `sl` (generation `gen`), running on the scheduler owning
    /// `loc`, waits under `epoch` for at most `d` after ticks() was `at`.
    void defer_wake(local& loc, slot& sl, std::uint32_t gen, std::uint32_t epoch, std::uint64_t at,
                    std::chrono::nanoseconds d) noexcept;
    /// The actor's wait is over: no deferred or armed wake survives it.
    void end_deferred_wake(slot& sl) noexcept;

    // ---- the scheduler loop ----
    /// Top of a loop turn: arms the deferred wakes, then the busy-path
    /// due-check (fires what is due unless another scheduler is in the heap).
    /// `loc` is `s`'s own.
    void turn(scheduler& s, local& loc) {
        if (!loc.deferred.empty()) arm_deferred(loc);
        // One relaxed load unless a timer exists, then the clock at most once
        // per due_check period (a loaded server always has some timer, and
        // reading the clock on every turn cost ~3% of its CPU).
        if (coord_.has_deadline()) {
            const std::uint64_t now = ticks();
            if (now >= loc.next_due_check) {
                loc.next_due_check = now + due_check_ticks_;
                if (coord_.deadline_due()) fire_due(s, loc, true);
            }
        }
    }
    /// Pops every due timer and delivers it. `try_only`: give up at once if
    /// another scheduler holds the heap (its snapshot stays due, so the
    /// check comes back next turn).
    void fire_due(scheduler& s, local& loc, bool try_only);
    /// A scheduler about to park takes the timekeeper role if it is free
    /// and a timer exists; returns the deadline to park until.
    std::optional<clock::time_point> claim_timekeeper(unsigned sched_id) noexcept;
    /// After the timekeeper's park: hand the role back (timers fired next may
    /// insert, and the insert check must not target a scheduler that is
    /// awake), then fire what is due.
    void end_timekeeping(scheduler& s, local& loc, unsigned sched_id) {
        coord_.disarm_timer(sched_id);
        fire_due(s, loc, false);
    }
    /// Is the earliest deadline due (one relaxed load and a clock read)?
    bool due() const noexcept { return coord_.deadline_due(); }
    /// Nothing is due and no scheduler is delivering fired timers (a manual
    /// clock's advance() waits for it). Takes the lock.
    bool settled();
    /// No timer is pending (the termination verdict and root drain).
    bool none_pending(std::memory_order mo) const noexcept { return pending_.load(mo) == 0; }
    std::size_t pending() const noexcept { return pending_.load(std::memory_order_relaxed); }
    /// Drops every timer: the run is over (nothing may keep it alive).
    void clear() noexcept;

  private:
    void arm_deferred(local& loc);
    void publish_locked() noexcept;  // caller holds mu_

    alignas(64) runtime_impl& rt_;
    coordinator& coord_;
    slot_table& slots_;
    const std::uint64_t due_check_ticks_;
    const double ns_per_tick_;
    // The lock's line is written by every scheduler that arms or fires; the
    // immutable part above is read on every loop turn (turn()): each has a
    // line of its own (sharing one: BM_timer_churn_100k 1.165x the old
    // build's ns per sleep; apart: 1.09x, the rest was sleep's calls,
    // docs/perf-log.md).
    alignas(64) spinlock mu_;
    timer_heap heap_;  // guarded by mu_
    /// heap_.size(), written under mu_ with release (the verdict's acquire
    /// loads see a timer inserted before the actor that armed it parked).
    std::atomic<std::size_t> pending_{0};
    /// fire_due calls between popping timers (under mu_) and delivering
    /// them all, for settled().
    std::atomic<unsigned> firing_{0};
};

}  // namespace smarm::internal
