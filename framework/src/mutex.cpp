// FIFO actor mutex with direct hand-off.
//
// Invariants (under mu_): locked_ is true while an owner exists, including
// the instant between a hand-off (waiter.granted = true) and the granted
// waiter running. A waiter node lives on its actor's stack and is linked
// only while that actor is inside acquire_until; it unlinks itself on
// timeout or stop, and a stop that lands after a grant passes the lock on.

#include <smarm/mutex.hpp>

namespace smarm::detail {

bool mutex_core::try_acquire() noexcept {
    std::lock_guard g(mu_);
    if (locked_) return false;
    locked_ = true;
    return true;
}

void mutex_core::remove(waiter* w) noexcept {
    waiter* prev = nullptr;
    for (waiter* cur = head_; cur != nullptr; prev = cur, cur = cur->next) {
        if (cur != w) continue;
        (prev ? prev->next : head_) = cur->next;
        if (tail_ == cur) tail_ = prev;
        return;
    }
}

bool mutex_core::acquire_until(clock::time_point deadline) {
    observe();
    pid me = current_pid("smarm::mutex::lock");
    waiter w;
    w.who = me;
    {
        std::lock_guard g(mu_);
        if (!locked_) {
            locked_ = true;
            return true;
        }
        (tail_ ? tail_->next : head_) = &w;
        tail_ = &w;
    }
    for (;;) {
        std::uint64_t timer = 0;
        {
            std::lock_guard g(mu_);
            if (w.granted) return true;
            if (clock::now() >= deadline) {
                remove(&w);
                return false;
            }
            w.epoch = begin_wait();
        }
        timer = arm_wake_timer(deadline, me, w.epoch);
        try {
            park(wait_reason::mutex);
        } catch (...) {
            disarm_timer(timer);
            bool pass_on;
            {
                std::lock_guard g(mu_);
                pass_on = w.granted;
                if (!pass_on) remove(&w);
            }
            if (pass_on) release();
            throw;
        }
        disarm_timer(timer);
    }
}

void mutex_core::release() noexcept {
    pid who;
    std::uint32_t epoch = 0;
    {
        std::lock_guard g(mu_);
        waiter* w = head_;
        if (w == nullptr) {
            locked_ = false;
            return;
        }
        head_ = w->next;
        if (head_ == nullptr) tail_ = nullptr;
        w->granted = true;  // ownership passes; locked_ stays true
        who = w->who;
        epoch = w->epoch;
    }
    unpark_at(who, epoch);
}

}  // namespace smarm::detail
