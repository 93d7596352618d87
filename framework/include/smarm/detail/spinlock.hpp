#pragma once
// A test-and-test-and-set spinlock for the runtime's short critical sections.
//
// Never hold one across an observation point (a call that can switch the
// actor): the actor could resume on another OS thread while a sibling spins.
// Runtime code that must call into the scheduler while holding one releases
// it first. Under contention it backs off to sched_yield, so a holder that the
// kernel preempted does not make waiters burn a whole quantum.

#include <atomic>

#include <sched.h>

// A function the optimizer must treat as opaque at every call: per-thread
// state reached through it is re-read after each call, never cached across
// a switch (GCC: noipa; clang has no noipa, optnone keeps it from inferring
// the function pure).
#if defined(__clang__)
#define SMARM_OPAQUE_CALL [[gnu::noinline, clang::optnone]]
#else
#define SMARM_OPAQUE_CALL [[gnu::noinline, gnu::noipa]]
#endif

namespace smarm::detail {

/// Set (once, before main) when the smarm::alloc_preempt library is linked.
/// Only then do spinlocks keep the per-thread depth below, which tells the
/// allocation observation point that a switch would strand a runtime lock.
inline std::atomic<bool> track_lock_depth{false};
/// This thread's runtime-lock depth. Read through a call (never inlined or
/// IPA-analysed): a cached thread_local address would be another thread's
/// after the actor migrates.
SMARM_OPAQUE_CALL unsigned& runtime_lock_depth() noexcept;

/// A polite spin-wait hint to the CPU.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

class spinlock {
  public:
    // Inline fast paths: every message takes a channel's lock.
    [[gnu::always_inline]] void lock() noexcept {
        // acquire: pairs with unlock()'s release, so the critical section
        // of the previous holder happens-before ours.
        if (locked_.exchange(true, std::memory_order_acquire)) [[unlikely]]
            lock_contended();
        if (track_lock_depth.load(std::memory_order_relaxed)) [[unlikely]]
            ++runtime_lock_depth();
    }
    bool try_lock() noexcept {
        if (locked_.load(std::memory_order_relaxed) ||
            locked_.exchange(true, std::memory_order_acquire))
            return false;
        if (track_lock_depth.load(std::memory_order_relaxed)) ++runtime_lock_depth();
        return true;
    }
    // release: publishes the critical section to the next acquirer.
    [[gnu::always_inline]] void unlock() noexcept {
        if (track_lock_depth.load(std::memory_order_relaxed)) [[unlikely]]
            --runtime_lock_depth();
        locked_.store(false, std::memory_order_release);
    }

    /// True while some thread holds the lock: for SMARM_ASSERT's "caller
    /// holds X" (it cannot tell which thread; a caller that forgot the lock
    /// is caught whenever nobody else holds it, which is nearly always).
    bool is_held() const noexcept { return locked_.load(std::memory_order_relaxed); }

  private:
    [[gnu::noinline]] void lock_contended() noexcept {
        for (unsigned spins = 0;;) {
            while (locked_.load(std::memory_order_relaxed)) {
                if (++spins > 64) {
                    sched_yield();
                    spins = 0;
                } else {
                    cpu_relax();
                }
            }
            if (!locked_.exchange(true, std::memory_order_acquire)) return;
        }
    }

    std::atomic<bool> locked_{false};
};

}  // namespace smarm::detail
