#pragma once
// The runtime's private state and the scheduler.
//
// Design note
// -----------
// N scheduler threads (thread 0 is the caller of run()) share one run queue
// (run_queue.hpp) and each owns a one-entry *wake slot*: an actor woken or
// spawned by code running on scheduler S goes to S's wake slot, displacing
// the previous occupant to the shared queue, and S pops its wake slot first.
// A ping-pong pair therefore stays on one thread, hot in cache (Go's
// runnext). The wake slot inherits the running timeslice, so such a pair
// cannot starve the shared queue.
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
// Loop iteration: (1) busy-path timer due-check; (2) pop (wake slot, then
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
//
// Thread-locals: the current scheduler is read only through a non-inlined
// accessor, because an actor can resume on another thread and a compiler may
// cache a thread_local's address across the switch.

#include <smarm/config.hpp>
#include <smarm/runtime.hpp>
#include <smarm/stats.hpp>

#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "coordinator.hpp"
#include "io_driver.hpp"
#include "run_queue.hpp"
#include "slot_table.hpp"
#include "stack_pool.hpp"
#include "timer_heap.hpp"

namespace smarm::detail {

class runtime_impl;

/// Name -> typed inbox bindings (registry.cpp). Guarded by mu; a channel's
/// lock may be taken under it (depth probes), never the reverse.
struct registry {
    struct binding {
        pid holder;
        std::type_index type;
        std::shared_ptr<void> tx;  ///< a sender<M>
        std::size_t (*depth)(const void*);
    };
    std::mutex mu;
    std::unordered_map<std::string, binding> bindings;  // guarded by mu

    static bool alive(runtime_impl& rt, pid p) noexcept;
    /// (name, mailbox depth) of every binding held by `p`.
    std::vector<std::pair<std::string, std::size_t>> names_of(runtime_impl& rt, pid p);
    /// (holder, name, mailbox depth) of every binding.
    std::vector<std::tuple<pid, std::string, std::size_t>> all();
    void clear() noexcept;
};

/// Process groups (pg.cpp). Guarded by mu.
struct process_groups {
    struct member {
        pid holder;
        std::type_index type;
        std::shared_ptr<void> tx;  ///< a sender<M>
    };
    std::mutex mu;
    std::unordered_map<std::string, std::vector<member>> groups;  // guarded by mu
    std::size_t cursor = 0;                                       // guarded by mu
    /// Removes `p` from every group (finalize of an actor that joined one).
    void evict(pid p);
    void clear() noexcept;
};

enum class switch_reason { yield, park, finish, handoff };

struct scheduler {
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
    std::uint64_t next_poll = 0;       ///< tick of the next busy-path netpoll
    std::uint64_t next_due_check = 0;  ///< tick of the next busy-path timer due-check

    // Clock reads at observation points (runtime.cpp, adapt_obs_period): the
    // current window is obs_period points long, obs_left of them to go.
    std::uint32_t obs_period = obs_period_initial;
    std::uint32_t obs_left = obs_period_initial;
    std::uint64_t obs_mark = 0;  ///< tick of the last clock read (or of the slice's start)

    /// The actor whose short period last shortened the window (obs_enter);
    /// credited when the window turns out chatty (adapt_obs_period).
    slot* obs_capper = nullptr;

    /// `next` takes over the running slice (a direct switch, a wake-slot
    /// actor): the clock-read window is shortened so that it ends within
    /// `next`'s own observation period, or an actor that observes rarely
    /// would inherit the long count of a chatty one (runtime.cpp,
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
    /// (see enqueue_from).
    slot* wake_slot = nullptr;
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
    std::vector<timer_heap::fired> fired;
    /// (slot, generation) of actors that deferred a wake timer while running
    /// here (detail::defer_wake); armed at the top of the next loop turn.
    /// Capacity is reserved up front: an actor pushes without allocating.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> deferred;
    void* eh_globals = nullptr;  ///< this thread's __cxa_eh_globals
    void* tsan_fiber = nullptr;
    const void* asan_bottom = nullptr;
    std::size_t asan_size = 0;

    // ---- counters (written by the owner, read by stats()) ----
    std::atomic<std::uint64_t> pops{0}, parks{0}, wakes{0}, yields{0}, overruns{0}, timer_fires{0},
        spawns{0};
};

/// Increment a counter that only one thread writes at a time (no lock prefix).
template <class U>
inline void bump(std::atomic<U>& c, std::type_identity_t<U> by = 1) noexcept {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

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

    // ---- timers ----
    std::uint64_t arm_wake(clock::time_point deadline, pid p, std::uint32_t epoch);
    std::uint64_t arm_call(clock::time_point deadline, unique_function fn);
    bool disarm(std::uint64_t id) noexcept;
    /// detail::defer_wake / end_deferred_wake for the actor running on `s`.
    void defer_wake(scheduler& s, std::uint32_t epoch, std::uint64_t at,
                    std::chrono::nanoseconds d) noexcept;
    void end_deferred_wake(slot& sl) noexcept;

    runtime_stats stats() const;
    const runtime_config& config() const noexcept { return cfg_; }
    /// An IO counter just dropped: if that was the last thing keeping the run
    /// alive, a parked scheduler must come out and evaluate the verdict.
    void io_settled() noexcept { coord_.wake_one_if_idle(); }
    registry& names() noexcept { return names_; }
    process_groups& groups() noexcept { return groups_; }
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
    std::uint64_t slice_ticks() const noexcept { return slice_ticks_; }

    /// IO producers (later issue) bump these before submitting, so the
    /// termination verdict never sees work vanish.
    std::atomic<std::uint32_t> io_outstanding{0};
    std::atomic<std::uint32_t> io_fd_waiters{0};

  private:
    void schedule_loop(scheduler& s);
    slot* resume(scheduler& s, slot& sl, bool from_wake_slot);
    void finalize(scheduler& s, slot& sl);
    void reclaim(slot& sl) noexcept;
    void fire_due_timers(scheduler& s, bool try_only);
    /// Arms the deferred wake timers of s.deferred whose wait is still open.
    void arm_deferred(scheduler& s);
    void stop_all_live() noexcept;
    bool nothing_can_wake() const noexcept;

    runtime_config cfg_;
    std::uint64_t slice_ticks_ = 0;
    std::uint64_t spin_ticks_ = 0;       // immutable: runtime_config::idle_spin in ticks
    std::uint64_t poll_ticks_ = 0;       // immutable: epoll poll period while spinning (2 us)
    std::uint64_t busy_poll_ticks_ = 0;  // immutable: busy-path netpoll period (20 us)
    std::uint64_t due_check_ticks_ = 0;  // immutable: busy-path timer due-check period (1 us)
    slot_table slots_;
    run_queue queue_;
    coordinator coord_;
    stack_pool stacks_;

    spinlock timers_mu_;  // short sections only; a spinlock keeps alloc_preempt out
    timer_heap timers_;   // guarded by timers_mu_
    std::atomic<std::size_t> timers_pending_{0};  // written under timers_mu_

    std::atomic<std::uint64_t> live_{0};
    std::atomic<bool> root_exited_{false};
    std::atomic<bool> root_swept_{false};
    pid root_;
    std::atomic<bool> running_{false};
    std::unique_ptr<scheduler[]> scheds_;
    std::unique_ptr<io_driver> io_;  // created per run, destroyed at teardown
    std::atomic<std::uint64_t> next_monitor_id_{1};
    registry names_;
    process_groups groups_;
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

/// Process-wide tick source for timeslices (TSC where available).
std::uint64_t ticks() noexcept;
/// Ticks per nanosecond, calibrated once.
double ticks_per_ns() noexcept;

}  // namespace smarm::detail
