#pragma once
// smarm::mutex<T> — an actor-aware lock around a value.
//
//     smarm::mutex<std::map<int, int>> m;
//     {
//         auto g = m.lock();            // parks (FIFO) at most 30 s by default
//         (*g)[1] = 2;
//     }                                 // handed to the next waiter
//
// Waiters park (they never block their OS thread) and are served in FIFO
// order: unlock hands ownership directly to the first waiter. Every lock is
// bounded by a timeout (default 30 s): lock() throws smarm::lock_timeout,
// try_lock_for() returns nullopt. A guard may be held across observation
// points and may be released on another OS thread (unlike std::mutex).
//
// Thread safety: lock()/try_lock_for() need an actor; try_lock() and guard
// release work anywhere. Not recursive: an actor locking twice waits for
// itself until the timeout.

#include <smarm/pid.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/wait.hpp>

namespace smarm {

/// Thrown by mutex::lock when the lock was not acquired in time.
class lock_timeout : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

namespace detail {
/// The untyped FIFO lock (framework/src/mutex.cpp).
class mutex_core {
  public:
    mutex_core() = default;
    mutex_core(const mutex_core&) = delete;
    mutex_core& operator=(const mutex_core&) = delete;

    bool acquire_until(clock::time_point deadline);
    bool try_acquire() noexcept;
    void release() noexcept;

  private:
    struct waiter {
        pid who;
        std::uint32_t epoch = 0;
        bool granted = false;
        waiter* next = nullptr;
    };
    void remove(waiter* w) noexcept;
    spinlock mu_;
    bool locked_ = false;     // guarded by mu_
    waiter* head_ = nullptr;  // guarded by mu_ (waiters live on their stacks)
    waiter* tail_ = nullptr;  // guarded by mu_
};
}  // namespace detail

template <class T>
class mutex {
  public:
    /// Ownership of the lock; gives access to the value. Move-only.
    class guard {
      public:
        guard(guard&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
        guard& operator=(guard&&) = delete;
        guard(const guard&) = delete;
        ~guard() {
            if (m_) m_->core_.release();
        }
        T& operator*() const noexcept { return m_->value_; }
        T* operator->() const noexcept { return &m_->value_; }
        /// Releases early.
        void unlock() noexcept {
            if (m_) std::exchange(m_, nullptr)->core_.release();
        }

      private:
        friend class mutex;
        explicit guard(mutex* m) noexcept : m_(m) {}
        mutex* m_;
    };

    template <class... Args>
    explicit mutex(Args&&... args) : value_(std::forward<Args>(args)...) {}

    /// Parks until acquired; throws lock_timeout after `timeout`.
    guard lock(std::chrono::nanoseconds timeout = std::chrono::seconds(30)) {
        if (!core_.acquire_until(detail::clock::now() + timeout))
            throw lock_timeout("smarm::mutex::lock: not acquired within " +
                               std::to_string(timeout.count() / 1'000'000) + " ms");
        return guard(this);
    }
    /// Parks at most `timeout`; nullopt when not acquired.
    std::optional<guard> try_lock_for(std::chrono::nanoseconds timeout) {
        if (!core_.acquire_until(detail::clock::now() + timeout)) return std::nullopt;
        return guard(this);
    }
    /// Never parks.
    std::optional<guard> try_lock() {
        if (!core_.try_acquire()) return std::nullopt;
        return guard(this);
    }

  private:
    detail::mutex_core core_;
    T value_;
};

}  // namespace smarm
