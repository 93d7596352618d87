#pragma once
// Pieces shared by gen_server and gen_statem: the call result type, the
// reply handle (smarm::reply_to), making a call and waiting for its reply,
// and binding a freshly started server's inbox to a name.
//
// A call allocates nothing for its reply: the answer is constructed straight
// into the caller's frame through the caller's per-actor reply cell
// (detail/reply_cell.hpp states the protocol), and the call's timeout is a
// deferred wake timer (detail::defer_wake), which enters the timer heap only
// if the caller is still waiting when its scheduler's loop next runs.
// Measured (smarm-micro BM_gen_server_call, 1 caller, 1 server, 2
// schedulers): 330 ns with a reply channel and a heap timer per call,
// 130-150 ns with the cell and the deferred timer.

#include <smarm/channel.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>

#include <smarm/detail/reply_cell.hpp>
#include <smarm/detail/wait.hpp>

namespace smarm {

/// Why a call returned no reply.
enum class call_error {
    server_down,  ///< not running, died, stopped, or dropped the request unanswered
    timeout,      ///< no reply within the call's timeout
};

inline const char* to_string(call_error e) noexcept {
    return e == call_error::server_down ? "server_down" : "timeout";
}

/// The reply to a call, or why there is none.
template <class Reply>
struct [[nodiscard]] call_result {
    std::optional<Reply> value;
    std::optional<call_error> error;
    explicit operator bool() const noexcept { return value.has_value(); }
};

namespace detail {
template <class Reply, class Send>
call_result<Reply> call_with_reply(std::chrono::nanoseconds timeout, Send&& send_request);
}

/// The handle through which a server answers one call (gen_server's
/// defer_reply(), a gen_statem call event's `reply`). Move-only; answer
/// once. Dropping it unanswered releases the caller at once with
/// call_error::server_down (so a server that dies holding calls never
/// leaves its callers waiting for their timeouts). A handle must not
/// outlive the runtime whose actor made the call.
template <class T>
class reply_to {
  public:
    reply_to() = default;
    reply_to(reply_to&& o) noexcept : cell_(std::exchange(o.cell_, nullptr)), call_(o.call_) {}
    reply_to& operator=(reply_to&& o) noexcept {
        if (this != &o) {
            finish(nullptr);
            cell_ = std::exchange(o.cell_, nullptr);
            call_ = o.call_;
        }
        return *this;
    }
    reply_to(const reply_to&) = delete;
    reply_to& operator=(const reply_to&) = delete;
    ~reply_to() { finish(nullptr); }

    /// Answers the call. True when the caller was still waiting (false: it
    /// timed out, was stopped, or this handle was already used).
    bool send(T value) { return finish(&value); }
    /// Answers the call; later answers are ignored.
    void operator()(T value) { (void)finish(&value); }
    /// True until answered (or dropped).
    bool pending() const noexcept { return cell_ != nullptr; }
    explicit operator bool() const noexcept { return pending(); }

  private:
    template <class R, class Send>
    friend call_result<R> detail::call_with_reply(std::chrono::nanoseconds, Send&&);
    reply_to(detail::reply_cell* c, std::uint64_t id) noexcept : cell_(c), call_(id) {}

    // value == nullptr: dropped unanswered.
    bool finish(T* value) {
        detail::reply_cell* c = std::exchange(cell_, nullptr);
        if (c == nullptr) return false;
        using st = detail::reply_cell::state;
        pid w;
        std::uint32_t e = 0;
        const std::uint32_t flow = value != nullptr && detail::trace_active()
                                       ? static_cast<std::uint32_t>(detail::trace_send())
                                       : 0;
        {
            std::lock_guard g(c->mu);
            if (c->call != call_ || c->st != st::waiting) return false;
            c->st = st::dropped;
            if (value != nullptr) {
                // A throwing move leaves the call dropped: the caller is
                // released with server_down, and the exception propagates.
                static_cast<std::optional<T>*>(c->dest)->emplace(std::move(*value));
                c->st = st::replied;
                c->flow = flow;
            }
            w = c->waiter;
            e = c->epoch;
        }
        if (w.valid()) detail::unpark_at(w, e);
        return value != nullptr;
    }

    detail::reply_cell* cell_ = nullptr;
    std::uint64_t call_ = 0;
};

namespace detail {

/// Makes a call: opens the calling actor's reply cell, hands
/// `send_request(reply_to<Reply>)` the handle (it returns false when the
/// server is not there), then parks for the answer, at most `timeout`.
/// An answer racing the deadline wins. The deadline is kept in ticks: the
/// clock is read only when the timer is armed or the actor is woken without
/// an answer.
template <class Reply, class Send>
call_result<Reply> call_with_reply(std::chrono::nanoseconds timeout, Send&& send_request) {
    using st = reply_cell::state;
    auto [c, me] = current_reply_cell("smarm::call");
    std::optional<Reply> value;
    std::uint64_t id;
    {
        std::lock_guard g(c->mu);
        id = ++c->call;
        c->st = st::waiting;
        c->dest = &value;
        c->waiter = pid{};
    }
    // Whatever way this frame is left, no late reply may write into it. Once
    // the answer (or the drop) was seen, the server's handle is spent and
    // the cell needs no closing.
    struct close_guard {
        reply_cell* c;
        std::uint64_t id;
        bool timed = false;
        bool answered = false;
        ~close_guard() {
            if (timed) end_deferred_wake();
            if (answered) return;
            std::lock_guard g(c->mu);
            if (c->call == id) {
                c->st = st::idle;
                c->dest = nullptr;
            }
        }
    } guard{c, id};
    // The deadline is kept as (the wait's start moment, timeout): the clock
    // is read only if the wait ever needs its timer.
    const std::uint64_t begun = wait_moment();
    if (!send_request(reply_to<Reply>(c, id))) return {std::nullopt, call_error::server_down};
    bool woken = false;
    for (;;) {
        std::uint32_t epoch;
        {
            std::unique_lock g(c->mu);
            if (c->st == st::replied || c->st == st::dropped) {
                guard.answered = true;
                if (c->st == st::dropped) return {std::nullopt, call_error::server_down};
                const std::uint32_t flow = std::exchange(c->flow, 0);
                g.unlock();
                trace_recv_flow(flow);
                return {std::move(value), std::nullopt};
            }
            if ((woken || timeout <= std::chrono::nanoseconds::zero()) &&
                clock::now() >= deadline_after(begun, timeout))
                return {std::nullopt, call_error::timeout};
            epoch = begin_wait();
            c->waiter = me;
            c->epoch = epoch;
        }
        // A re-deferral replaces the previous one (same actor, new epoch).
        if (timeout != std::chrono::nanoseconds::max()) {
            guard.timed = true;
            defer_wake(epoch, begun, timeout);
        }
        (void)park_here(wait_reason::call);
        woken = true;
    }
}

/// Binds `n` to `inbox` on behalf of the server actor `holder`, so the name
/// resolves as soon as the starter returns. When a live actor already holds
/// the name, the new server is stopped and std::runtime_error names `n`.
template <class Env>
void bind_started_server(pid holder, name<Env> n, const sender<Env>& inbox, const char* who) {
    if (registry_bind_for(holder, n.text, typeid(Env), std::make_shared<sender<Env>>(inbox),
                          &sender_probe<Env>))
        return;
    request_stop(holder);
    throw std::runtime_error(std::string(who) + ": the name \"" + std::string(n.text) +
                             "\" is held by a live actor");
}

/// The inbox registered under `n`, or nullptr.
template <class Env>
std::shared_ptr<const sender<Env>> resolve_inbox(name<Env> n) {
    auto r = registry_resolve(n.text, typeid(Env));
    if (!r.found) return nullptr;
    return std::static_pointer_cast<const sender<Env>>(r.found->tx);
}

}  // namespace detail
}  // namespace smarm
