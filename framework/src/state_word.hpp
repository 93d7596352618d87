#pragma once
// The per-slot state word: wait identity and run state in one atomic.
//
// Design note
// -----------
// Layout (64 bits): [generation:32][epoch:29][state:3]. Every transition a
// third party makes (unpark_at, stop_wake) is a CAS that first compares the
// generation, so an operation through a stale pid is a no-op by
// construction. The owner's transitions (spawn, start_running, yield_return,
// finish, reclaim) are plain stores: while the owner holds the word, the
// only concurrent writes are those CASes flipping Running ->
// RunningNotified, and each store's comment says why losing that flip is
// harmless; park_return and retire_wait must not lose it, so they CAS.
//
// Every resume opens a new *park epoch* (start_running), and a wait that
// ends without parking retires its epoch (retire_wait); so each wait has an
// epoch of its own, read with begin_wait() at no atomic cost. Wakers call
// unpark_at(gen, epoch), which succeeds only while that exact wait is open:
// a waker left behind by a finished wait (a losing select arm, a timer
// whose message already won) fails the compare and does nothing, so no
// primitive needs a cancellation pass. A wake landing while the actor is
// still running (between registering and parking) turns Running into
// RunningNotified, and the scheduler's park_return then requeues instead of
// parking: the lost-wakeup window is closed by the word, not by a lock.
//
// States (what is owned in each):
//   vacant            slot free; nobody may touch its actor fields.
//   queued            in exactly one run queue (or a wake slot); the popping
//                     scheduler owns the transition to running.
//   running           on a scheduler thread; the actor owns its stack.
//   running_notified  running, and its open wait was already woken (or a stop
//                     requested): its next park returns at once.
//   parked            suspended in a wait; the single successful unpark_at /
//                     stop_wake owns the transition to queued (and enqueues).
//   done              finished; the slot awaits reclaim (outcome held).
// Invariant: an actor is enqueued at most once at any time, because only the
// winner of a transition *into* queued enqueues.

#include <smarm/detail/assert.hpp>

#include <atomic>
#include <cstdint>

#include "internal.hpp"

namespace smarm::internal {

enum class actor_state : std::uint8_t {
    vacant = 0,
    queued = 1,
    running = 2,
    running_notified = 3,
    parked = 4,
    done = 5,
};

const char* to_string(actor_state s) noexcept;

class state_word {
  public:
    static constexpr std::uint64_t state_mask = 0x7;
    static constexpr std::uint64_t epoch_mask = 0x1fff'ffff;  // 29 bits

    static std::uint64_t pack(std::uint32_t gen, std::uint32_t epoch, actor_state s) noexcept {
        return (std::uint64_t{gen} << 32) | (std::uint64_t{epoch & epoch_mask} << 3) |
               static_cast<std::uint64_t>(s);
    }
    static std::uint32_t gen_of(std::uint64_t w) noexcept {
        return static_cast<std::uint32_t>(w >> 32);
    }
    static std::uint32_t epoch_of(std::uint64_t w) noexcept {
        return static_cast<std::uint32_t>((w >> 3) & epoch_mask);
    }
    static actor_state state_of(std::uint64_t w) noexcept {
        return static_cast<actor_state>(w & state_mask);
    }

    // acquire: a reader of the word sees what the last writer published.
    std::uint64_t load() const noexcept { return w_.load(std::memory_order_acquire); }

    /// Vacant(gen) -> Queued(gen, epoch 0): the spawner owns the slot.
    void spawn(std::uint32_t gen) noexcept {
        SMARM_ASSERT(state_of(w_.load(std::memory_order_relaxed)) == actor_state::vacant);
        w_.store(pack(gen, 0, actor_state::queued), std::memory_order_release);
    }
    /// Queued -> Running(epoch + 1), by the scheduler that popped the actor.
    /// Every resume opens a fresh epoch, so whatever wait the actor parked in
    /// (or abandoned by yielding) is closed for good and its wakers are inert.
    /// Returns the actor's generation.
    std::uint32_t start_running() noexcept {
        // A plain store is enough: while Queued nobody else writes the word
        // (unpark_at and stop_wake leave a queued word alone), and the pop
        // that handed us the actor already synchronized with its enqueuer.
        std::uint64_t w = w_.load(std::memory_order_relaxed);
        SMARM_ASSERT(state_of(w) == actor_state::queued);
        w_.store(pack(gen_of(w), epoch_of(w) + 1, actor_state::running), std::memory_order_relaxed);
        return gen_of(w);
    }
    /// The actor itself, running: the epoch its next wait registers under.
    /// No write: the epoch was opened by start_running(), and a wait that
    /// ends without parking must call retire_wait() before the next one.
    /// Other threads can only flip Running <-> RunningNotified meanwhile,
    /// never the epoch, so a relaxed load of our own word is exact.
    std::uint32_t begin_wait() const noexcept {
        return epoch_of(w_.load(std::memory_order_relaxed));
    }
    /// Any thread. Returns true when the caller won Parked -> Queued and must
    /// enqueue the actor. Running(e) -> RunningNotified(e) returns false.
    bool unpark_at(std::uint32_t gen, std::uint32_t epoch) noexcept {
        std::uint64_t w = w_.load(std::memory_order_acquire);
        for (;;) {
            if (gen_of(w) != gen || epoch_of(w) != (epoch & epoch_mask)) return false;
            actor_state s = state_of(w);
            actor_state to;
            if (s == actor_state::parked)
                to = actor_state::queued;
            else if (s == actor_state::running)
                to = actor_state::running_notified;
            else
                return false;
            // acq_rel: the waker's publication (a queued message) happens-
            // before the actor's resume.
            if (w_.compare_exchange_weak(w, with_state(w, to), std::memory_order_acq_rel,
                                         std::memory_order_acquire))
                return to == actor_state::queued;
        }
    }
    /// Stop wake: wakes the current wait whatever its epoch. True when the
    /// caller must enqueue.
    bool stop_wake(std::uint32_t gen) noexcept {
        std::uint64_t w = w_.load(std::memory_order_acquire);
        for (;;) {
            if (gen_of(w) != gen) return false;
            actor_state s = state_of(w);
            actor_state to;
            if (s == actor_state::parked)
                to = actor_state::queued;
            else if (s == actor_state::running)
                to = actor_state::running_notified;
            else
                return false;
            if (w_.compare_exchange_weak(w, with_state(w, to), std::memory_order_acq_rel,
                                         std::memory_order_acquire))
                return to == actor_state::queued;
        }
    }
    /// Scheduler, after the actor switched out to park: Running -> Parked
    /// (true), or RunningNotified -> Queued (false: requeue it).
    bool park_return() noexcept {
        std::uint64_t w = w_.load(std::memory_order_acquire);
        for (;;) {
            actor_state s = state_of(w);
            SMARM_ASSERT(is_running(s));
            actor_state to = s == actor_state::running ? actor_state::parked : actor_state::queued;
            if (w_.compare_exchange_weak(w, with_state(w, to), std::memory_order_acq_rel,
                                         std::memory_order_acquire))
                return to == actor_state::parked;
        }
    }
    /// Scheduler, after a yield: Running / RunningNotified -> Queued. A plain
    /// store, not a CAS: a concurrent unpark_at / stop_wake can only flip
    /// Running -> RunningNotified, and a notification is dropped at Queued
    /// anyway (the next start_running opens a fresh epoch; a stop stays in
    /// stop_for), so either order ends the same. release: the enqueue that
    /// follows publishes the word with the actor.
    void yield_return() noexcept {
        std::uint64_t w = w_.load(std::memory_order_relaxed);
        SMARM_ASSERT(is_running(state_of(w)));
        w_.store(with_state(w, actor_state::queued), std::memory_order_release);
    }
    /// The actor: retire the open wait without parking — a new epoch (so
    /// wakers of the old one are inert) and RunningNotified -> Running.
    void retire_wait() noexcept {
        std::uint64_t w = w_.load(std::memory_order_relaxed);
        SMARM_ASSERT(is_running(state_of(w)));
        while (!w_.compare_exchange_weak(w, pack(gen_of(w), epoch_of(w) + 1, actor_state::running),
                                         std::memory_order_acq_rel, std::memory_order_relaxed)) {
        }
    }
    /// Scheduler, finalize: Running / RunningNotified -> Done. A plain store,
    /// not a CAS: the only concurrent writers (unpark_at, stop_wake) flip
    /// Running -> RunningNotified and leave generation and epoch alone, so
    /// whichever lands first the word ends Done with the same identity (a
    /// wake that loses is moot: the actor is gone). release: pairs with the
    /// acquire loads that see Done (join's fast path reads the outcome
    /// written before).
    void finish() noexcept {
        std::uint64_t w = w_.load(std::memory_order_relaxed);
        SMARM_ASSERT(is_running(state_of(w)));
        w_.store(with_state(w, actor_state::done), std::memory_order_release);
    }
    /// Reclaim: Done(gen) -> Vacant(gen + 1). Returns the new generation.
    std::uint32_t reclaim() noexcept {
        std::uint64_t w = w_.load(std::memory_order_relaxed);
        SMARM_ASSERT(state_of(w) == actor_state::done);
        std::uint32_t next = gen_of(w) + 1;
        w_.store(pack(next, 0, actor_state::vacant), std::memory_order_release);
        return next;
    }

  private:
    static bool is_running(actor_state s) noexcept {
        return s == actor_state::running || s == actor_state::running_notified;
    }
    static std::uint64_t with_state(std::uint64_t w, actor_state s) noexcept {
        return (w & ~state_mask) | static_cast<std::uint64_t>(s);
    }
    std::atomic<std::uint64_t> w_{0};
};

}  // namespace smarm::internal
