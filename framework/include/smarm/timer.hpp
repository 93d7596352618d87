#pragma once
// smarm timers beyond sleep(): delayed sends and their cancellation.
//
// All timers live in the runtime's one heap; deadlines are nanosecond
// precise. A delayed send runs on a scheduler thread when due (it does not
// park anybody). Timers still pending when a run ends are dropped.
//
// Virtual time: while the causal profiler injects delay (causal.hpp), a
// timer's deadline moves later by the delay injected since it was armed,
// so timeouts keep their length in the profiled program's virtual time.
// The _wall variants (and sleep_wall) are anchored to wall time instead:
// for measurement machinery whose sleeps define wall time.

#include <smarm/channel.hpp>
#include <smarm/registry.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include <smarm/detail/wait.hpp>

namespace smarm {

/// Identifies a pending timer (for cancel_timer).
struct timer_id {
    std::uint64_t value = 0;
    friend bool operator==(timer_id, timer_id) = default;
};

namespace detail {
/// The thunk a delayed send runs: to a sender, or to a name resolved when
/// it fires (its text copied).
template <class T>
unique_function delayed_send(sender<T> to, T msg) {
    return [to = std::move(to), msg = std::move(msg)]() mutable { (void)to.send(std::move(msg)); };
}
template <class T>
unique_function delayed_send(name<T> n, T msg) {
    return [text = std::string(n.text), msg = std::move(msg)]() mutable {
        (void)smarm::send(name<T>(text), std::move(msg));
    };
}
}  // namespace detail

/// Sends `msg` to `to` after `delay`. If the receiver is gone by then, the
/// message is dropped. Throws std::logic_error when no runtime is running.
template <class T>
timer_id send_after(std::chrono::nanoseconds delay, sender<T> to, T msg) {
    return timer_id{detail::arm_call_timer(detail::clock::now() + delay,
                                           detail::delayed_send(std::move(to), std::move(msg)))};
}

/// send_after anchored to wall time: never shifted by causal-profiling
/// virtual time (identical to send_after while no delay was injected).
template <class T>
timer_id send_after_wall(std::chrono::nanoseconds delay, sender<T> to, T msg) {
    return timer_id{detail::arm_call_timer(
        detail::clock::now() + delay, detail::delayed_send(std::move(to), std::move(msg)), true)};
}

/// Sends `msg` to whoever holds `n` when the timer fires (resolved then,
/// so a restarted holder gets it); dropped when nobody does. The name's
/// text is copied.
template <class T>
timer_id send_after(std::chrono::nanoseconds delay, name<T> n, T msg) {
    return timer_id{detail::arm_call_timer(detail::clock::now() + delay,
                                           detail::delayed_send(n, std::move(msg)))};
}
/// send_after by name, anchored to wall time.
template <class T>
timer_id send_after_wall(std::chrono::nanoseconds delay, name<T> n, T msg) {
    return timer_id{detail::arm_call_timer(detail::clock::now() + delay,
                                           detail::delayed_send(n, std::move(msg)), true)};
}

/// Cancels a pending timer: true when it had not fired (it never will).
inline bool cancel_timer(timer_id id) noexcept {
    return detail::disarm_timer(id.value);
}

}  // namespace smarm
