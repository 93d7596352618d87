#pragma once
// smarm::channel — unbounded multi-producer, single-consumer channels: how
// actors talk to each other.
//
//     auto [tx, rx] = smarm::channel<std::string>();
//     auto worker = smarm::spawn([rx = std::move(rx)] {
//         while (auto msg = rx.recv()) handle(*msg);   // nullopt once closed
//     });
//     (void)tx.send("hello");
//
// Semantics
// - sender<T> is copyable; the channel is open while any copy lives. send()
//   never blocks; when the receiver is gone it hands the message back.
// - receiver<T> is move-only: a channel has exactly one receiver, used by one
//   actor at a time (two actors parked on one receiver is detected and
//   reported with std::logic_error). Destroying it drops every queued
//   message at once (their destructors run), so e.g. queued requests
//   release their callers.
// - recv() parks until a message or closure (every sender gone and the
//   queue drained). recv_timeout(): a message racing the deadline wins.
//   recv_match()/try_recv_match(): selective receive; the predicate runs
//   under the channel's lock, so it must be cheap and must not touch the
//   same channel.
//
// Thread safety: senders may be used from any thread (including non-actor
// threads); the blocking receive calls need an actor.
//
// Implementation: a spinlock-protected ring (no allocation until the first
// message) plus the parked receiver's (pid, park epoch). A wake for an
// epoch that has already ended (a losing select arm, a timed-out receive) is
// inert by the state-word protocol, so wakers are never unregistered.
//
// Hand-off: a plain recv() that parks also registers a slot in its own frame
// (channel_state::handoff). The next send moves its message straight into
// that slot and marks it full (release) instead of queueing it, so the woken
// receiver returns without taking the lock again (one locked RMW fewer per
// message: ~5% of a ping-pong). Unlike a waker, the slot must never outlive
// the frame: the receiver withdraws it under the lock on every other way
// out of the park (a stop, closure, a stop deferred by no_preempt), and a
// message handed just before such a withdrawal goes back to the front of
// the queue. Invariant: handoff is set only while a recv() is between its
// registration and that check, so every other receive finds it null.

#include <smarm/detail/assert.hpp>
#include <smarm/pid.hpp>
#include <smarm/select.hpp>
#include <smarm/trace.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <smarm/detail/ring.hpp>
#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/wait.hpp>

namespace smarm {

/// Result of sender::send: ok, or the undelivered message handed back.
template <class T>
struct [[nodiscard]] send_result {
    std::optional<T> returned;  ///< engaged when the receiver was gone
    bool ok() const noexcept { return !returned.has_value(); }
    explicit operator bool() const noexcept { return ok(); }
};

enum class recv_status {
    ok,       ///< a message was received
    empty,    ///< nothing queued (try_ variants)
    timeout,  ///< the deadline passed (recv_timeout)
    closed,   ///< every sender is gone and nothing is queued
};

/// Result of the non-plain receive calls.
template <class T>
struct [[nodiscard]] recv_result {
    recv_status status = recv_status::empty;
    std::optional<T> value;  ///< engaged iff status == ok
    explicit operator bool() const noexcept { return status == recv_status::ok; }
};

namespace detail {
/// The misuse report of register_waiter, out of line (keeps the hot path
/// small).
[[noreturn, gnu::cold, gnu::noinline]] inline void receiver_in_use(const char* call, pid self,
                                                                   pid holder) {
    throw std::logic_error(std::string(call) + ": actor " + self.to_string() +
                           " waits on a channel whose receiver is already in use by actor " +
                           holder.to_string() + " (a channel has exactly one receiving actor)");
}

/// A queued message, when it was queued (queue_stamp(): the oldest one's
/// age is introspection's, smarm/introspect.hpp) and, while tracing, the
/// flow its send recorded (smarm/trace.hpp; 0: none).
/// The stamp and the flow come first: a small message packs after them
/// (an int message is 16 bytes, not 24).
template <class T>
struct queued {
    std::uint64_t at;
#if SMARM_TRACE_ENABLED
    std::uint32_t flow;
    T value;
    queued(T&& v, std::uint32_t f, std::uint64_t t) : at(t), flow(f), value(std::move(v)) {}
#else
    static constexpr std::uint32_t flow = 0;
    T value;
    queued(T&& v, std::uint32_t, std::uint64_t t) : at(t), value(std::move(v)) {}
#endif
};

/// What introspection reads of a queue: its length and the stamp of its
/// oldest message (0 when empty).
struct queue_probe {
    std::size_t depth = 0;
    std::uint64_t oldest = 0;
};

/// The receive's trace event for a message sent as `flow` (queued while
/// recording). A message handed to a parked receiver's slot records nothing
/// on the receiving side: the send names the receiver, whose next run is
/// the receive (smarm/trace.hpp).
[[gnu::always_inline]] inline void trace_recv_flow(std::uint32_t flow) noexcept {
    if (flow != 0) [[unlikely]]
        trace_recv(flow);
}

template <class T>
class channel_state final : public select_source {
  public:
    spinlock mu;
    ring<queued<T>> queue;  // guarded by mu
    pid waiter;     // guarded by mu: the parked receiver
    std::uint32_t waiter_epoch = 0;
    /// A parked recv()'s slot and its full flag (see the header comment).
    std::optional<T>* handoff = nullptr;        // guarded by mu
    std::atomic<bool>* handoff_full = nullptr;  // guarded by mu
    std::size_t senders = 1;                    // guarded by mu
    bool receiver_alive = true;                 // guarded by mu

    bool ready_or_register(pid self, std::uint32_t epoch) override {
        std::lock_guard g(mu);
        if (!queue.empty() || senders == 0) return true;
        register_waiter(self, epoch, "smarm::select");
        return false;
    }
    /// Caller holds mu.
    void register_waiter(pid self, std::uint32_t epoch, const char* call) {
        SMARM_ASSERT(mu.is_held());
        if (waiter.valid() && waiter != self && wait_is_open(waiter, waiter_epoch))
            receiver_in_use(call, self, waiter);
        waiter = self;
        waiter_epoch = epoch;
    }
};

}  // namespace detail

template <class T>
class receiver;

/// The sending half of a channel. Copyable; see the header comment.
template <class T>
class sender {
  public:
    sender() = default;
    sender(const sender& o) : st_(o.st_) {
        if (st_) {
            std::lock_guard g(st_->mu);
            ++st_->senders;
        }
    }
    sender(sender&&) noexcept = default;
    sender& operator=(const sender& o) {
        if (this != &o) {
            sender tmp(o);
            *this = std::move(tmp);
        }
        return *this;
    }
    sender& operator=(sender&& o) noexcept {
        if (this != &o) {
            drop();
            st_ = std::move(o.st_);
        }
        return *this;
    }
    ~sender() { drop(); }

    /// Queues `v` for the receiver (never blocks). If the receiver is gone,
    /// `v` comes back in the result. Observation point inside an actor (after
    /// the message is queued).
    [[gnu::always_inline]] send_result<T> send(T v) const {
        if (!st_) return send_result<T>{std::move(v)};
        pid w;
        std::uint32_t e = 0;
        std::uint32_t flow = 0;  // a queued message's, while tracing
        {
            std::lock_guard g(st_->mu);
            if (!st_->receiver_alive) return send_result<T>{std::move(v)};
            if (st_->handoff != nullptr) [[likely]] {
                st_->handoff->emplace(std::move(v));
                // release: the receiver reads the slot after an acquire of
                // this flag, without the lock.
                st_->handoff_full->store(true, std::memory_order_release);
                st_->handoff = nullptr;
            } else {
                if (detail::trace_active()) [[unlikely]]
                    flow = detail::trace_flow_id();
                st_->queue.push_back(detail::queued<T>(std::move(v), flow, detail::queue_stamp()));
            }
            w = std::exchange(st_->waiter, pid{});
            e = st_->waiter_epoch;
        }
        // Outside the lock (recording may allocate a thread's first buffer):
        // flow 0 is a hand-off to the parked receiver `w`.
        if (detail::trace_active()) [[unlikely]]
            detail::trace_sent(flow, w);
        // Wake, then the observation point - after the push: a send that
        // returns has delivered, even when the sender is then preempted or
        // stopped here.
        detail::unpark_then_observe(w, e);
        return {};
    }
    /// Messages queued and not yet received (takes the lock: not for hot paths).
    std::size_t queued() const { return probe().depth; }
    /// The queue's length and its oldest message's stamp, for introspection
    /// (takes the lock: not for hot paths).
    detail::queue_probe probe() const {
        if (!st_) return {};
        std::lock_guard g(st_->mu);
        if (st_->queue.empty()) return {};
        return {st_->queue.size(), st_->queue[0].at};
    }
    /// False once the receiver is gone (a send would hand the message back).
    bool connected() const {
        if (!st_) return false;
        std::lock_guard g(st_->mu);
        return st_->receiver_alive;
    }
    explicit operator bool() const noexcept { return st_ != nullptr; }

  private:
    template <class U>
    friend std::pair<sender<U>, receiver<U>> channel();
    explicit sender(std::shared_ptr<detail::channel_state<T>> st) : st_(std::move(st)) {}
    void drop() noexcept {
        if (!st_) return;
        pid w;
        std::uint32_t e = 0;
        {
            std::lock_guard g(st_->mu);
            // The last sender wakes the receiver even on a non-empty queue: a
            // recv_match parked on non-matching messages must see closure.
            if (--st_->senders == 0) {
                w = std::exchange(st_->waiter, pid{});
                e = st_->waiter_epoch;
            }
        }
        if (w.valid()) detail::unpark_at(w, e);
        st_.reset();
    }
    std::shared_ptr<detail::channel_state<T>> st_;
};

/// The receiving half of a channel. Move-only; see the header comment.
template <class T>
class receiver {
  public:
    receiver() = default;
    receiver(receiver&&) noexcept = default;
    receiver& operator=(receiver&& o) noexcept {
        if (this != &o) {
            drop();
            st_ = std::move(o.st_);
        }
        return *this;
    }
    receiver(const receiver&) = delete;
    receiver& operator=(const receiver&) = delete;
    ~receiver() { drop(); }

    /// Parks until a message arrives; nullopt once the channel is closed and
    /// drained. Observation point.
    [[gnu::always_inline]] std::optional<T> recv() const {
        const char* call = "smarm::receiver::recv";
        auto w = detail::observe_and_open(call);
        std::optional<T> out;  // the hand-off slot (one named result: NRVO)
        std::atomic<bool> full{false};
        for (;;) {
            {
                std::lock_guard g(st_->mu);
                if (!st_->queue.empty()) {
                    detail::count_received(w);
                    auto q = st_->queue.pop_front();
                    // Under the lock (this path is recv()'s hot one: no
                    // second test on the way to the park); recording
                    // allocates only at a thread's first event of a trace.
                    detail::trace_recv_flow(q.flow);
                    out.emplace(std::move(q.value));
                    return out;
                }
                if (st_->senders == 0) return out;
                st_->register_waiter(w.self, w.epoch, call);
                st_->handoff = &out;
                st_->handoff_full = &full;
            }
            const std::uint32_t next_epoch = park_for_handoff(out, full);
            if (out) {
                detail::count_received(w);
                return out;
            }
            w.epoch = next_epoch;
        }
    }
    /// Never parks.
    recv_result<T> try_recv() const {
        return try_recv_match([](const T&) { return true; });
    }
    /// Parks at most `timeout`. A message that arrives by the time the
    /// receiver runs again wins over the deadline.
    recv_result<T> recv_timeout(std::chrono::nanoseconds timeout) const {
        return recv_until(detail::clock::now() + timeout);
    }
    recv_result<T> recv_until(detail::clock::time_point deadline) const {
        detail::observe();
        pid me = detail::current_pid("smarm::receiver::recv_timeout");
        std::uint64_t timer = 0;
        struct disarm_guard {
            std::uint64_t* id;
            ~disarm_guard() {
                if (*id) detail::disarm_timer(*id);
            }
        } guard{&timer};
        for (;;) {
            std::uint32_t epoch;
            {
                std::unique_lock g(st_->mu);
                if (!st_->queue.empty()) {
                    detail::note_message_received();
                    auto q = st_->queue.pop_front();
                    g.unlock();
                    detail::trace_recv_flow(q.flow);
                    return {recv_status::ok, std::move(q.value)};
                }
                if (st_->senders == 0) return {recv_status::closed, std::nullopt};
                if (detail::clock::now() >= deadline) return {recv_status::timeout, std::nullopt};
                epoch = detail::begin_wait();
                st_->register_waiter(me, epoch, "smarm::receiver::recv_timeout");
            }
            if (timer) detail::disarm_timer(std::exchange(timer, 0));
            timer = detail::arm_wake_timer(deadline, me, epoch);
            detail::park(detail::wait_reason::channel);
        }
    }
    /// Selective receive: the first queued message satisfying `pred`, parking
    /// until one arrives; nullopt once closed with no match.
    template <class Pred>
    std::optional<T> recv_match(Pred&& pred) const {
        return recv_match_impl(pred, "smarm::receiver::recv_match");
    }
    /// Selective receive that never parks.
    template <class Pred>
    recv_result<T> try_recv_match(Pred&& pred) const {
        std::unique_lock g(st_->mu);
        for (std::size_t i = 0; i < st_->queue.size(); ++i) {
            if (pred(static_cast<const T&>(st_->queue[i].value))) {
                detail::note_message_received();
                auto q = st_->queue.take(i);
                g.unlock();
                detail::trace_recv_flow(q.flow);
                return {recv_status::ok, std::move(q.value)};
            }
        }
        return {st_->senders == 0 ? recv_status::closed : recv_status::empty, std::nullopt};
    }
    /// Messages currently queued.
    std::size_t queued() const {
        std::lock_guard g(st_->mu);
        return st_->queue.size();
    }
    explicit operator bool() const noexcept { return st_ != nullptr; }

    /// For select_arm.
    detail::select_source& select_source() const noexcept { return *st_; }

  private:
    // Parks a recv() whose slot `out` is registered. On return the slot is
    // no longer registered: a send filled it, or it was withdrawn here.
    // Returns the epoch of the actor's next wait (park_here).
    [[gnu::always_inline]] std::uint32_t park_for_handoff(std::optional<T>& out,
                                                          std::atomic<bool>& full) const {
        std::uint32_t next_epoch;
        try {
            next_epoch = detail::park_here(detail::wait_reason::channel);
        } catch (...) {  // smarm::stopped: the frame is about to go
            withdraw(out, true);
            throw;
        }
        // acquire: pairs with the sender's release; then `out` is ours.
        if (!full.load(std::memory_order_acquire)) [[unlikely]]
            withdraw(out, false);
        return next_epoch;
    }
    // Takes the slot back under the lock. Filled meanwhile (a send raced the
    // wake that ended the park): on a normal return the value is kept and
    // received; when unwinding it goes back to the front of the queue.
    [[gnu::noinline]] void withdraw(std::optional<T>& out, bool unwinding) const {
        std::lock_guard g(st_->mu);
        if (st_->handoff == &out) {
            st_->handoff = nullptr;
            st_->handoff_full = nullptr;
        } else if (out && unwinding) {
            // Its send named this receiver's next run as the receive: the
            // flow ends at the unwinding run.
            st_->queue.push_front(detail::queued<T>(std::move(*out), 0, detail::queue_stamp()));
            out.reset();
        }
    }
    template <class U>
    friend std::pair<sender<U>, receiver<U>> channel();
    explicit receiver(std::shared_ptr<detail::channel_state<T>> st) : st_(std::move(st)) {}

    template <class Pred>
    [[gnu::always_inline]] std::optional<T> recv_match_impl(Pred&& pred, const char* call) const {
        auto w = detail::observe_and_open(call);
        // One named result (NRVO): returning a fresh disengaged optional from
        // this inlined loop made GCC 12 warn maybe-uninitialized in callers.
        std::optional<T> out;
        for (;;) {
            std::uint32_t flow = 0;
            {
                std::lock_guard g(st_->mu);
                for (std::size_t i = 0; i < st_->queue.size(); ++i) {
                    if (pred(static_cast<const T&>(st_->queue[i].value))) {
                        detail::count_received(w);
                        auto q = st_->queue.take(i);
                        out.emplace(std::move(q.value));
                        flow = q.flow;
                        break;
                    }
                }
                if (!out) {
                    if (st_->senders == 0) return out;
                    st_->register_waiter(w.self, w.epoch, call);
                }
            }
            if (out) {
                detail::trace_recv_flow(flow);
                return out;
            }
            w.epoch = detail::park_here(detail::wait_reason::channel);
        }
    }
    void drop() noexcept {
        if (!st_) return;
        detail::ring<detail::queued<T>> drained;
        {
            std::lock_guard g(st_->mu);
            st_->receiver_alive = false;
            st_->waiter = pid{};
            drained = std::move(st_->queue);
        }
        st_.reset();
        // `drained` is destroyed here, outside the lock: a message's
        // destructor may touch other channels or the scheduler.
    }
    std::shared_ptr<detail::channel_state<T>> st_;
};

/// Creates a channel: {sender, receiver}.
template <class T>
std::pair<sender<T>, receiver<T>> channel() {
    auto st = std::make_shared<detail::channel_state<T>>();
    return {sender<T>(st), receiver<T>(st)};
}

}  // namespace smarm
