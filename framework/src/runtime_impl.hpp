#pragma once
// The runtime: what one run shares (slots, queue, coordinator, stacks,
// timers, name tables, IO) and the message path's inline half. The loop is
// schedule.cpp, spawn/finish/join spawn.cpp, observation points
// observe.cpp, the header hooks of the wait protocol wait.cpp, timers
// timer_service.cpp, construction, run() and the public facade runtime.cpp.
//
// Design note
// -----------
// N scheduler threads (thread 0 is the caller of run()) share one run queue
// (run_queue.hpp) and each owns a one-entry *wake slot*: an actor woken or
// spawned by code running on scheduler S goes to S's wake slot, displacing
// the previous occupant to the shared queue, and S pops its wake slot first.
// A ping-pong pair therefore stays on one thread, hot in cache (Go's
// runnext). The wake slot inherits the running timeslice, so such a pair
// cannot starve the shared queue. The wake slot is not a place to wait
// behind a busy actor, though: an occupant seen there at clock reads of
// the running actor a 16th of a slice apart, with nothing popped between
// (so within about 2/16 of a slice, observe.cpp), moves to the shared
// queue, waking an idle sibling (spill_stale_wake_slot). A ping-pong
// parks long before that; a producer that wakes its consumer and keeps
// computing no longer runs both on one thread while the other idles (a
// two-stage pipeline of 200 + 300 us stages ran at 1/(S+R): -12% when its
// slow stage was made 25% faster).
//
// Spawn is work-first: the new actor runs at once and its spawner takes the
// wake slot (a `handoff` switch). A spawn tree therefore unfolds depth-first
// on one scheduler while displaced spawners feed the shared queue for the
// siblings, so few actors are live at once and stacks stay hot. Measured on
// skynet (1M leaves, 2 schedulers): 0.19 s work-first vs 0.70 s warm /
// 17.6 s cold with spawn-into-wake-slot (Go's placement), which kept ~1M
// actors, and so ~1M freshly touched stacks, alive at the peak.
//
// Direct switch: an actor that parks, hands off to its new child or
// finishes while its scheduler's wake slot holds an actor jumps straight to
// that actor (take_direct) instead of returning to the loop, which would
// only pop the wake slot and jump again. The actor switched to completes
// the leaver's switch once the leaver's context is saved
// (direct_switch_done, via fiber.cpp switched_in): the same park_return /
// requeue / finalize the loop would run, so the state-word protocol is
// unchanged. A finalize run there runs under no_preempt (the actor it runs
// on must not yield or take a stop inside another actor's end). At most
// direct_period direct switches happen between two loop iterations, so the
// busy-path timer check, deferred timers and netpoll still run. Measured:
// ping-pong round trip 150 -> 100 ns (smarm-micro BM_pingpong_1M).
//
// Loop iteration (schedule.cpp): (1) deferred wakes and the busy-path timer
// due-check (timer_service.hpp); (2) pop (wake slot, then
// shared queue); (3) chain rule: more queued work => wake one idle sibling;
// (4) resume the actor until it yields, parks or finishes. With nothing to
// pop, the scheduler evaluates the termination verdict (queue empty,
// live_actors == 0, no IO in flight; IO counters are read before the pop),
// the root drain (root gone, nothing runnable, no timer or IO that could
// wake anyone: the parked-forever rest is stopped once), and otherwise parks
// through the coordinator, as timekeeper if it wins the role.
//
// live_actors is incremented before a spawn's enqueue and decremented at the
// very end of finalize, after every wake finalize produced was enqueued: so
// live_actors == 0 with an empty queue means no work can appear again.

#include <smarm/config.hpp>
#include <smarm/runtime.hpp>
#include <smarm/stats.hpp>

#include <atomic>
#include <bit>
#include <cstdint>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "coordinator.hpp"
#include "core_share.hpp"
#include "run_queue.hpp"
#include "scheduler.hpp"
#include "slot_table.hpp"
#include "stack_pool.hpp"
#include "timer_service.hpp"

#include "internal.hpp"

namespace smarm::internal {

class io_driver;
struct process_groups;
struct registry;

class runtime_impl {
  public:
    explicit runtime_impl(runtime_config cfg);
    ~runtime_impl();

    void run(unique_function root);

    // ---- scheduling ----
    /// Make `sl` runnable: to the calling scheduler's wake slot when called
    /// on one of ours (a displaced occupant goes to the shared queue), else
    /// to the shared queue with a wake of an idle sibling.
    void enqueue(slot& sl) noexcept;
    /// enqueue() for a caller that already knows its scheduler (or nullptr).
    /// Inline: it is on every message's path.
    void enqueue_from(scheduler* caller, slot& sl) noexcept;
    /// Shared queue + wake_one_if_idle.
    void enqueue_shared(std::uint32_t idx) noexcept;
    /// At an actor's clock read on `s` (tick `now`): a wake-slot occupant
    /// that has waited a 16th of a slice with nothing popped goes to the
    /// shared queue, where an idle sibling takes it (see the design note).
    void spill_stale_wake_slot(scheduler& s, std::uint64_t now) noexcept;
    void unpark_at(pid p, std::uint32_t epoch, scheduler* caller) noexcept;
    /// An actor on `s` is about to park, hand off to its new child or
    /// finish: if the wake slot holds an actor and the loop is not due, make
    /// that one current and return it so the leaving actor switches straight
    /// to it (the loop's pop + resume, without the two switches through the
    /// scheduler's stack).
    slot* take_direct(scheduler& s) noexcept;
    /// Run by the actor switched to, once `from`'s context is saved: what
    /// resume() does after the switch (park_return, the handoff's requeue
    /// into the wake slot, or finalize). The park case is inline.
    void direct_switch_done(scheduler& s, slot& from, switch_reason why) noexcept;
    void direct_switch_done_slow(scheduler& s, slot& from, switch_reason why) noexcept;
    /// `next` (popped, Queued) becomes the actor running on `s`: a fresh
    /// epoch, the observation window cut to its period (a no-op right after
    /// a fresh slice set it), counted as a pop. resume() and take_direct().
    void make_current(scheduler& s, slot& next) noexcept;
    bool request_stop(pid p) noexcept;

    // ---- spawning ----
    spawn_reservation reserve(std::size_t size, std::size_t align, const task_vtable* vt,
                              scheduler* on);
    void abandon(spawn_reservation& r) noexcept;
    void commit(spawn_reservation& r, pid parent, scheduler* caller) noexcept;
    void release_handle(pid p) noexcept;
    outcome join(pid p);

    // ---- timers (timer_service.hpp) ----
    timer_service& timers() noexcept { return timers_; }

    runtime_stats stats() const;
    const runtime_config& config() const noexcept { return cfg_; }
    /// An IO counter just dropped: if that was the last thing keeping the run
    /// alive, a parked scheduler must come out and evaluate the verdict.
    void io_settled() noexcept { coord_.wake_one_if_idle(); }
    /// Every parked scheduler rechecks its work and the timers (a
    /// clock_source's time moved).
    void wake_all_schedulers() noexcept { coord_.wake_all(); }
    /// The epoll thread, resting (some scheduler is awake): re-sample the
    /// cores other processes use, move the awake cap and allow or forbid
    /// idle spinning (core_share.hpp); a risen cap with work queued wakes a
    /// sibling.
    void sample_core_share() noexcept;
    /// The name tables (names.hpp).
    registry& names() noexcept { return *names_; }
    process_groups& groups() noexcept { return *groups_; }
    std::uint64_t next_monitor_id() noexcept {
        return next_monitor_id_.fetch_add(1, std::memory_order_relaxed);
    }
    /// Every scheduler is parked (or committed to parking).
    bool all_schedulers_idle() noexcept {
        return static_cast<unsigned>(std::popcount(coord_.idle_mask())) == cfg_.schedulers;
    }
    /// The IO producers of the current run (valid only while run() runs).
    io_driver& io() noexcept { return *io_; }
    slot_table& slots() noexcept { return slots_; }
    /// Live actors and the shared queue's length, relaxed (the tracer's counters).
    std::uint64_t live_count() const noexcept { return live_.load(std::memory_order_relaxed); }
    std::size_t queued_count() const noexcept { return queue_.size(); }
    std::uint64_t slice_ticks() const noexcept { return slice_ticks_; }

    /// IO producers (later issue) bump these before submitting, so the
    /// termination verdict never sees work vanish.
    std::atomic<std::uint32_t> io_outstanding{0};
    std::atomic<std::uint32_t> io_fd_waiters{0};

  private:
    // ---- the scheduler loop (schedule.cpp) ----
    void schedule_loop(scheduler& s);
    /// The termination verdict, read with `mo` over `io` (the IO counters'
    /// sum, read by the caller before its pop) and the other counters.
    enum class verdict { go_on, over, drain };
    verdict judge(std::uint32_t io, std::memory_order mo) const noexcept;
    std::uint32_t io_in_flight(std::memory_order mo) const noexcept {
        return io_outstanding.load(mo) + io_fd_waiters.load(mo);
    }
    /// With actors waiting on sockets, harvest ready events on the busy
    /// path every busy_poll period; true when that filled the wake slot.
    bool busy_poll(scheduler& s, std::uint32_t io);
    /// Nothing to pop: spin (polling epoll) for a while unless this
    /// scheduler already spun since it last ran an actor. False: park next.
    bool idle_spin(scheduler& s);
    /// Park through the coordinator, as timekeeper if the role is free.
    void park_idle(scheduler& s);
    /// The run is over: no timer may keep anyone, every sibling comes out.
    void end_run() noexcept;
    /// Run `next` and whoever it hands the CPU to, until one comes back to
    /// the loop without a successor.
    void run_turn(scheduler& s, slot* next, bool from_wake_slot);
    slot* resume(scheduler& s, slot& sl, bool from_wake_slot);
    void stop_all_live() noexcept;

    // ---- spawn, finish, join (spawn.cpp) ----
    void finalize(scheduler& s, slot& sl);
    void reclaim(slot& sl) noexcept;

    runtime_config cfg_;
    std::uint64_t slice_ticks_ = 0;
    std::uint64_t spin_ticks_ = 0;       // immutable: runtime_config::idle_spin in ticks
    std::uint64_t poll_ticks_ = 0;       // immutable: epoll poll period while spinning (2 us)
    std::uint64_t busy_poll_ticks_ = 0;  // immutable: busy-path netpoll period (20 us)
    slot_table slots_;
    // The shared queue, the coordinator's idle mask and live_ are written by
    // every scheduler: each starts a cache line of its own, apart from each
    // other and from the immutable fields above (a precaution: no
    // benchmark moved measurably when they were aligned, docs/perf-log.md).
    alignas(64) run_queue queue_;
    alignas(64) coordinator coord_;
    core_share cores_;  // the epoll thread's alone
    // Written by the epoll thread (sample_core_share), read by idle
    // schedulers; relaxed: a stale value only decides whether one idle
    // spell spins (parking is always safe).
    std::atomic<bool> spin_allowed_{true};
    stack_pool stacks_;

    timer_service timers_;

    alignas(64) std::atomic<std::uint64_t> live_{0};
    std::atomic<bool> root_exited_{false};
    std::atomic<bool> root_swept_{false};
    pid root_;
    std::atomic<bool> running_{false};
    std::unique_ptr<scheduler[]> scheds_;
    std::unique_ptr<io_driver> io_;  // created per run, destroyed at teardown
    std::atomic<std::uint64_t> next_monitor_id_{1};
    const std::unique_ptr<registry> names_;
    const std::unique_ptr<process_groups> groups_;
};

/// Deliver `who`'s end to its monitors and links (monitor.cpp). Called by
/// finalize on the scheduler thread, after Done was published.
void notify_exit(runtime_impl& rt, scheduler& s, pid who, exit_kind kind, std::exception_ptr error,
                 std::vector<std::pair<std::uint64_t, sender<down>>>& monitors,
                 std::vector<pid>& links);

// ---- the message path, inline (every send, receive and park goes here) ----

[[gnu::always_inline]] inline void runtime_impl::enqueue_from(scheduler* s, slot& sl) noexcept {
    if (s != nullptr && s->rt == this) {
        slot* prev = std::exchange(s->wake_slot, &sl);
        if (prev != nullptr) enqueue_shared(prev->index);
        return;
    }
    enqueue_shared(sl.index);
}

inline void runtime_impl::unpark_at(pid p, std::uint32_t epoch, scheduler* caller) noexcept {
    slot* sl = slots_.at(p.index);
    if (sl != nullptr && sl->word.unpark_at(p.generation, epoch)) enqueue_from(caller, *sl);
}

inline void runtime_impl::make_current(scheduler& s, slot& next) noexcept {
    s.current_gen = next.word.start_running();
    s.current = &next;
    s.obs_enter(next);
    bump(s.pops);
}

inline slot* runtime_impl::take_direct(scheduler& s) noexcept {
    slot* next = s.wake_slot;
    if (next == nullptr || s.direct_left == 0) return nullptr;
    --s.direct_left;
    // The loop's chain rule, which a direct switch skips: surplus work and
    // an idle sibling => wake one. Without it a sibling that parked while
    // this scheduler switched directly stayed parked with the shared queue
    // full (starved clients timed out in Net.EchoThousandClients under load).
    if (!queue_.empty()) coord_.wake_one_if_idle();
    s.wake_slot = nullptr;
    make_current(s, *next);
    return next;
}

inline void runtime_impl::direct_switch_done(scheduler& s, slot& from, switch_reason why) noexcept {
    if (why == switch_reason::park) {
        if (!from.word.park_return()) enqueue_from(&s, from);
        return;
    }
    direct_switch_done_slow(s, from, why);
}

}  // namespace smarm::internal
