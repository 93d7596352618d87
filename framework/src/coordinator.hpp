#pragma once
// Scheduler park/wake coordination (seed RFC 018).
//
// Design note
// -----------
// Schedulers never sleep on a shared fd. Each one parks on its own futex
// *parker* with permit semantics (an unpark delivered before the park is kept
// and consumed by the next park, which then returns at once: that closes the
// check-then-block race). Which schedulers are parked is published in one
// 64-bit *idle mask* (so at most 64 schedulers).
//
// Park protocol (consumer): set own idle bit; seq_cst fence; mandatory
// re-check of every work source; block. Producer protocol: publish work;
// seq_cst fence; ONE relaxed load of the mask; only if non-zero, RMW-read the
// mask, CAS one bit clear (highest first: the most recently parked, warmest
// cache) and unpark exactly that scheduler. The two fences form a Dekker
// pair: either the producer sees the bit, or the consumer's re-check sees
// the work. With everyone busy the producer pays a fence and a load of an
// unmodified line. (A plain load without the fences loses wakes; the Promela
// model tests/models/no_lost_wake_broken.pml shows the counterexample.)
//
// Timekeeper: at most one parked scheduler holds the earliest timer deadline
// and parks with that timeout; the others park indefinitely, so an expiry
// wakes one thread, not a herd. Arm and the insert-side check are serialized
// by the caller's timer_service lock; an insert earlier than the armed deadline
// unparks the holder so it re-peeks. Races are biased to over-wake (a spare
// permit costs one empty pop; a missed wake would strand an actor).
//
// Earliest-deadline snapshot: maintained under the timer_service lock, read with
// one relaxed load on every scheduler loop iteration (the busy-path
// due-check): under saturation nobody parks, so no timekeeper exists, yet
// timers must fire. The clock is read only when a deadline exists.
//
// Awake cap: the producer path wakes a sibling only while fewer than
// `awake_cap` schedulers are awake (default: the CPUs the process may use).
// More runnable threads than cores only adds futex round trips and OS
// preemption of threads that hold wake slots (measured: 8 schedulers on 2
// cores ran a message ring at 0.45x of 2 schedulers without the cap). It is
// sound for the same Dekker reason as the wake itself: a producer that saw
// >= 1 awake scheduler either left work that scheduler's next pop or idle
// re-check finds, or saw its bit. The cost: a scheduler stuck in a foreign
// blocking syscall still counts as awake.
//
// The cap moves (set_awake_cap, 1..the CPUs the process may use): the epoll
// thread lowers it when other processes keep cores busy and raises it when
// they leave (core_share.hpp has the measurement and its numbers). An idle
// scheduler that finds more schedulers awake than the cap parks at once
// instead of spinning (over_cap), so a capped runtime runs like one with
// fewer schedulers while the cores are contended. Work that already waited
// a 16th of a slice behind a busy actor (spill_stale_wake_slot) wakes a
// sibling past the moved cap: the cap saves eager wakes, it does not make a
// runnable actor wait out another's slice. Soundness needs only
// cap >= 1 at every moment, whatever value a producer reads: the Dekker
// argument above holds for any awake scheduler it counted
// (tests/models/awake_cap.pml, whose broken variant lets the cap reach 0).
//
// Rejected: a wake pipe (level-triggered herd: 8 threads ran 7x slower than
// 2 in the seed), broadcast wakes, millisecond timeouts (sub-ms sleeps
// truncated to busy polls).

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include <smarm/detail/wait.hpp>  // detail::clock: the runtime's clock

#include "internal.hpp"

namespace smarm::internal {

/// Futex parker with permit semantics. One thread parks on it at a time.
class parker {
  public:
    /// Block until unparked or `deadline` passes. Returns true when a permit
    /// was consumed, false on timeout.
    bool park(std::optional<clock::time_point> deadline) noexcept;
    /// Deliver a permit; wakes the parked thread if there is one.
    void unpark() noexcept;

  private:
    static constexpr std::uint32_t empty = 0, parked = 1, notified = 2;
    std::atomic<std::uint32_t> state_{empty};
};

enum class park_result {
    woken,      ///< a permit was consumed
    timed_out,  ///< the deadline passed without a wake
    work_found  ///< the re-check found work; the thread never blocked
};

class coordinator {
  public:
    static constexpr std::uint64_t no_deadline = ~std::uint64_t{0};

    /// Throws std::invalid_argument unless 1 <= schedulers <= 64.
    /// `awake_cap` (0 = schedulers) bounds how many schedulers the producer
    /// path keeps awake: wake_one_if_idle does not wake a sibling when that
    /// many are already awake (see the design note).
    explicit coordinator(unsigned schedulers, unsigned awake_cap = 0);

    unsigned schedulers() const noexcept { return n_; }

    /// Park scheduler `id` (the protocol in the design note). `recheck` must
    /// read every work source with an ordering that pairs with the
    /// producers' publication (seq_cst loads or the producer's lock).
    template <class Recheck>
    park_result park(unsigned id, std::optional<clock::time_point> deadline, Recheck&& recheck) {
        const std::uint64_t bit = std::uint64_t{1} << id;
        // acq_rel: if this RMW follows a producer's mask RMW in modification
        // order we read-from it, and its earlier work is visible below.
        idle_.fetch_or(bit, std::memory_order_acq_rel);
        // Pairs with the producer fence in wake_one_if_idle (Dekker).
        dekker_fence();
        if (recheck()) {
            idle_.fetch_and(~bit, std::memory_order_acq_rel);
            return park_result::work_found;
        }
        bool woken = parkers_[id].park(deadline);
        // A waker may already have cleared the bit; clearing again is a no-op.
        idle_.fetch_and(~bit, std::memory_order_acq_rel);
        return woken ? park_result::woken : park_result::timed_out;
    }

    /// Wake exactly one parked scheduler (highest idle bit). False if none.
    bool wake_one() noexcept;
    /// Producer tail: fence + one relaxed mask load; wake_one only if non-zero
    /// and fewer than the awake cap are awake (`past_cap`: fewer than the
    /// cap's ceiling, for work already stale behind a busy actor).
    bool wake_one_if_idle(bool past_cap = false) noexcept;
    /// Terminal wake: clear the mask and permit every parker. Idempotent.
    void wake_all() noexcept;
    /// The awake cap now (relaxed: a stale value is sound, see the note).
    unsigned awake_cap() const noexcept { return cap_.load(std::memory_order_relaxed); }
    /// Clamps to 1..the constructor's cap. Returns true when it rose.
    bool set_awake_cap(unsigned cap) noexcept;
    /// More schedulers awake than the cap (an idle one should not spin).
    bool over_cap() const noexcept {
        return n_ - static_cast<unsigned>(std::popcount(idle_.load(std::memory_order_relaxed))) >
               cap_.load(std::memory_order_relaxed);
    }
    /// Latest idle mask (an RMW read). Tests and introspection only.
    std::uint64_t idle_mask() noexcept { return idle_.fetch_or(0, std::memory_order_acq_rel); }

    // ---- timekeeper (caller holds the timer_service lock for arm and inserts) ----
    bool try_arm_timer(unsigned id, clock::time_point deadline) noexcept;
    void disarm_timer(unsigned id) noexcept;
    void timer_inserted(clock::time_point deadline) noexcept;
    std::uint64_t armed_deadline_nanos() const noexcept {
        return tk_armed_.load(std::memory_order_relaxed);
    }

    // ---- earliest-deadline snapshot (writes under the timer_service lock) ----
    /// Record an inserted deadline (keeps the minimum) and run the
    /// timekeeper insert check.
    void note_deadline(clock::time_point deadline) noexcept;
    /// Re-anchor to the heap minimum after pops/cancels (nullopt = empty).
    void refresh_deadline(std::optional<clock::time_point> next) noexcept;
    /// True when some deadline is armed (one relaxed load).
    bool has_deadline() const noexcept {
        return next_deadline_.load(std::memory_order_relaxed) != no_deadline;
    }
    /// Busy-path due-check: one relaxed load; the clock only when armed.
    bool deadline_due() const noexcept {
        std::uint64_t n = next_deadline_.load(std::memory_order_relaxed);
        return n != no_deadline && nanos(clock::now()) >= n;
    }
    std::optional<clock::time_point> next_deadline() const noexcept;

    /// Saturating encoding relative to the construction instant: at or
    /// before the origin is 0 (always due).
    std::uint64_t nanos(clock::time_point t) const noexcept;

  private:
    // The seq_cst fence of the Dekker pair. ThreadSanitizer does not model
    // fences (GCC refuses them under -fsanitize=thread), so TSan builds use
    // the other sound resolution the seed documents: a seq_cst RMW on the
    // shared mask itself, which totally orders both sides' accesses to it.
    void dekker_fence() noexcept {
#if SMARM_TSAN
        idle_.fetch_add(0, std::memory_order_seq_cst);
#else
        std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
    }

    static constexpr std::uint64_t no_timekeeper = ~std::uint64_t{0};
    unsigned n_;
    unsigned max_awake_;  // immutable: the cap's ceiling
    // Written by the epoll thread (set_awake_cap), read relaxed by producers
    // and idle schedulers: any value in 1..max_awake_ is sound.
    std::atomic<unsigned> cap_;
    std::unique_ptr<parker[]> parkers_;
    std::atomic<std::uint64_t> idle_{0};
    // Written under the timer_service lock; read lock-free by the insert wake path.
    std::atomic<std::uint64_t> tk_holder_{no_timekeeper};
    std::atomic<std::uint64_t> tk_armed_{no_deadline};
    // Written under the timer_service lock; read lock-free by every loop iteration.
    std::atomic<std::uint64_t> next_deadline_{no_deadline};
    clock::time_point origin_;  // immutable
};

}  // namespace smarm::internal
