#pragma once
// The shared run queue: a FIFO ring of slot indices under a spinlock.
//
// Because an actor is enqueued at most once at any time (state_word.hpp),
// the queue never holds more than max_actors entries: the ring is sized once
// and never allocates. `size_` is also kept in an atomic so the idle path's
// re-check and the chain rule read it without the lock (seq_cst: it pairs
// with the coordinator's Dekker fences).
//
// Kept behind this small interface so a work-stealing variant can be
// measured against it.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include <smarm/detail/spinlock.hpp>

#include "internal.hpp"

namespace smarm::internal {

class run_queue {
  public:
    explicit run_queue(std::size_t capacity) {
        std::size_t cap = 1;
        while (cap < capacity)
            cap <<= 1;
        ring_.resize(cap);
        mask_ = cap - 1;
    }
    void push(std::uint32_t idx) noexcept {
        {
            std::lock_guard g(mu_);
            ring_[tail_++ & mask_] = idx;
            size_.store(tail_ - head_, std::memory_order_seq_cst);
        }
    }
    bool pop(std::uint32_t& idx) noexcept {
        if (size_.load(std::memory_order_seq_cst) == 0) return false;
        std::lock_guard g(mu_);
        if (head_ == tail_) return false;
        idx = ring_[head_++ & mask_];
        size_.store(tail_ - head_, std::memory_order_seq_cst);
        return true;
    }
    bool empty() const noexcept { return size_.load(std::memory_order_seq_cst) == 0; }
    std::size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }

  private:
    spinlock mu_;
    std::vector<std::uint32_t> ring_;  // guarded by mu_
    std::size_t mask_ = 0;             // immutable
    std::size_t head_ = 0, tail_ = 0;  // guarded by mu_
    std::atomic<std::size_t> size_{0};
};

}  // namespace smarm::internal
