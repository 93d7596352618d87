#include "coordinator.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <ctime>
#include <stdexcept>
#include <string>

namespace smarm::internal {

namespace {

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                const timespec* relative) noexcept {
    // EAGAIN (word changed), ETIMEDOUT and EINTR all mean "return and let
    // the caller's state machine decide".
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected,
            relative, nullptr, 0);
}

#if defined(SMARM_TSAN)
// TSan runs an asynchronous signal's handler only when the receiving thread
// next enters an intercepted function, and a thread parked in a raw futex
// syscall never does: a SIGTERM to an idle server was never handled (found
// by the smarm-server signal test under TSan). TSan builds therefore wake a
// parked thread at least every 20 ms and pass through an interceptor.
constexpr std::int64_t tsan_park_cap_ns = 20'000'000;
#endif

void futex_wake(std::atomic<std::uint32_t>* word, int n) noexcept {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, n, nullptr,
            nullptr, 0);
}

}  // namespace

bool parker::park(std::optional<clock::time_point> deadline) noexcept {
    std::uint32_t expected = empty;
    // acq_rel: consuming a permit acquires what the unparker published.
    if (!state_.compare_exchange_strong(expected, parked, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        // Only `notified` can be here: one thread parks at a time.
        state_.store(empty, std::memory_order_release);
        return true;
    }
    for (;;) {
        timespec ts{};
        const timespec* tsp = nullptr;
        if (deadline) {
            auto now = clock::now();
            if (*deadline <= now) {
                // Cancel the park; a racing unpark that already landed wins.
                return state_.exchange(empty, std::memory_order_acq_rel) == notified;
            }
            auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(*deadline - now).count();
            ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
            ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
            tsp = &ts;
        }
#if defined(SMARM_TSAN)
        if (tsp == nullptr || ts.tv_sec > 0 || ts.tv_nsec > tsan_park_cap_ns) {
            ts.tv_sec = 0;
            ts.tv_nsec = tsan_park_cap_ns;
            tsp = &ts;
        }
#endif
        futex_wait(&state_, parked, tsp);
#if defined(SMARM_TSAN)
        {
            timespec probe{};
            ::clock_gettime(CLOCK_MONOTONIC, &probe);  // an interceptor: pending signals run
        }
#endif
        expected = notified;
        if (state_.compare_exchange_strong(expected, empty, std::memory_order_acq_rel,
                                           std::memory_order_acquire))
            return true;
        // Spurious return or timeout with the state still `parked`: the
        // deadline check at the top decides.
    }
}

void parker::unpark() noexcept {
    // acq_rel: releases the waker's work to the consumer of the permit.
    if (state_.exchange(notified, std::memory_order_acq_rel) == parked) futex_wake(&state_, 1);
}

coordinator::coordinator(unsigned schedulers, unsigned awake_cap)
    : n_(schedulers),
      max_awake_(awake_cap == 0 || awake_cap > schedulers ? schedulers : awake_cap),
      cap_(max_awake_),
      origin_(clock::now()) {
    if (schedulers < 1 || schedulers > 64)
        throw std::invalid_argument(
            "smarm::coordinator: scheduler count must be 1..64 (the idle "
            "mask is one 64-bit word); got " +
            std::to_string(schedulers));
    parkers_ = std::make_unique<parker[]>(schedulers);
}

bool coordinator::wake_one() noexcept {
    // RMW read, not a load: reads the latest mask in modification order,
    // closing the Dekker race with a consumer publishing its bit.
    std::uint64_t mask = idle_.fetch_or(0, std::memory_order_acq_rel);
    while (mask != 0) {
        unsigned id = 63u - static_cast<unsigned>(std::countl_zero(mask));
        std::uint64_t bit = std::uint64_t{1} << id;
        // Whoever clears the bit owns the wake: exactly one waker per parker.
        if (idle_.compare_exchange_weak(mask, mask & ~bit, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
            parkers_[id].unpark();
            return true;
        }
    }
    return false;
}

bool coordinator::wake_one_if_idle(bool past_cap) noexcept {
    // Pairs with the fence in park(): the caller's work publication is
    // ordered before this load, the consumer's bit before its re-check.
    dekker_fence();
    std::uint64_t mask = idle_.load(std::memory_order_relaxed);
    if (mask == 0) return false;
    const unsigned cap = past_cap ? max_awake_ : cap_.load(std::memory_order_relaxed);
    if (n_ - static_cast<unsigned>(std::popcount(mask)) >= cap) return false;
    return wake_one();
}

bool coordinator::set_awake_cap(unsigned cap) noexcept {
    cap = std::clamp(cap, 1u, max_awake_);
    return cap_.exchange(cap, std::memory_order_relaxed) < cap;
}

void coordinator::wake_all() noexcept {
    idle_.store(0, std::memory_order_release);
    for (unsigned i = 0; i < n_; ++i)
        parkers_[i].unpark();
}

bool coordinator::try_arm_timer(unsigned id, clock::time_point deadline) noexcept {
    std::uint64_t expected = no_timekeeper;
    if (!tk_holder_.compare_exchange_strong(expected, id, std::memory_order_seq_cst)) return false;
    // Holder before deadline: an insert check seeing the holder with
    // no_deadline still compares "earlier" and over-wakes (benign).
    tk_armed_.store(nanos(deadline), std::memory_order_seq_cst);
    return true;
}

void coordinator::disarm_timer(unsigned) noexcept {
    // Deadline first: a concurrent insert check then skips a pointless wake.
    tk_armed_.store(no_deadline, std::memory_order_seq_cst);
    tk_holder_.store(no_timekeeper, std::memory_order_seq_cst);
}

void coordinator::timer_inserted(clock::time_point deadline) noexcept {
    if (nanos(deadline) < tk_armed_.load(std::memory_order_seq_cst)) {
        std::uint64_t holder = tk_holder_.load(std::memory_order_seq_cst);
        // Direct unpark: the timekeeper itself must re-peek the heap.
        if (holder != no_timekeeper) parkers_[holder].unpark();
    }
}

void coordinator::note_deadline(clock::time_point deadline) noexcept {
    std::uint64_t n = nanos(deadline);
    // Plain compare+store is enough: writers are serialized by the timer_service lock.
    if (n < next_deadline_.load(std::memory_order_relaxed))
        next_deadline_.store(n, std::memory_order_release);
    timer_inserted(deadline);
}

void coordinator::refresh_deadline(std::optional<clock::time_point> next) noexcept {
    next_deadline_.store(next ? nanos(*next) : no_deadline, std::memory_order_release);
}

std::optional<clock::time_point> coordinator::next_deadline() const noexcept {
    std::uint64_t n = next_deadline_.load(std::memory_order_acquire);
    if (n == no_deadline) return std::nullopt;
    return origin_ + std::chrono::nanoseconds(n);
}

std::uint64_t coordinator::nanos(clock::time_point t) const noexcept {
    if (t <= origin_) return 0;
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count();
    return static_cast<std::uint64_t>(ns) >= no_deadline ? no_deadline - 1
                                                         : static_cast<std::uint64_t>(ns);
}

}  // namespace smarm::internal
