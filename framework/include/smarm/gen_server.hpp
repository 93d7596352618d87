#pragma once
// smarm::gen_server — a request/response server actor, OTP style.
//
//     struct counter : smarm::gen_server<int /*call*/, int /*reply*/, int /*cast*/> {
//         int n = 0;
//         int handle_call(int add) override { return n += add; }
//         void handle_cast(int add) override { n += add; }
//     };
//     auto ref = smarm::start<counter>();
//     auto r = smarm::call(ref, 5, 1s);      // r.value == 5, or r.error
//     smarm::cast(ref, 1);
//
// Callback contract (all run in the server actor, one at a time):
//   handle_call(Call) -> Reply     a call; the reply goes back to the caller.
//   handle_cast(Cast)              fire-and-forget message.          (optional)
//   handle_info(Info)              any other message (send_info).    (optional)
//   handle_timer(tag)              a timer armed with arm_after /
//                                  arm_every fired; timers are served
//                                  before queued inbox messages.     (optional)
//   terminate(exit_kind)           the server is ending (normal stop,
//                                  stop request, or an exception).   (optional)
// handle_call may answer later: defer_reply() hands over the caller's
// reply handle (smarm::reply_to; the returned value is then discarded).
// A callback that throws ends the server (outcome panic): callers still
// queued see call_error::server_down. stop() inside a callback ends the
// server after that callback.
//
// call(ref_or_name, request, timeout) -> call_result: the reply, or
// server_down (the server is not running, died, or was stopped while the
// call was queued) or timeout. Named servers (start_named) resolve the
// moment start_named returns.
//
// Thread safety: refs are values; use them from any actor.

#include <smarm/causal.hpp>
#include <smarm/channel.hpp>
#include <smarm/detail/call.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>
#include <smarm/timer.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace smarm {

/// Base of a server: override the handlers (see the header comment).
template <class Call, class Reply, class Cast = std::monostate, class Info = std::monostate>
class gen_server {
  public:
    using call_type = Call;
    using reply_type = Reply;
    using cast_type = Cast;
    using info_type = Info;

    /// What travels in a server's inbox.
    struct call_msg {
        Call request;
        reply_to<Reply> reply;
        /// The causal site the caller hands this call's handling to (0:
        /// none; smarm::causal::handoff_guard).
        causal::site_id site = 0;
    };
    using envelope = std::variant<call_msg, Cast, Info>;

    gen_server() {
        // Created with the server object, so timers can be armed in the
        // constructor (they fire once serve() runs).
        auto [tx, rx] = channel<timer_fire>();
        timers_ = std::move(tx);
        timer_rx_ = std::move(rx);
    }
    virtual ~gen_server() = default;

    virtual Reply handle_call(Call request) = 0;
    virtual void handle_cast(Cast) {}
    virtual void handle_info(Info) {}
    virtual void handle_timer(std::uint64_t /*tag*/) {}
    virtual void terminate(exit_kind) {}

    /// Runs the server loop on the calling actor until stopped. Used by
    /// start(); call it yourself to turn an existing actor into a server.
    void serve(receiver<envelope> inbox) {
        auto& trx = timer_rx_;
        exit_kind why = exit_kind::exit;
        try {
            while (!stopping_) {
                if (armed_.empty()) {
                    // No timer is armed, so none can fire (timers are armed
                    // only by this server's callbacks; a fire left queued by
                    // cancel() is ignored anyway): the inbox alone, one lock
                    // per message. recv() is an observation point, so a
                    // draining server stays preemptible and stoppable.
                    auto next = inbox.recv();
                    if (!next) break;
                    dispatch(std::move(*next));
                    continue;
                }
                check();
                // Timer fires are served before the inbox. Only an empty
                // round parks (select); a busy server just drains.
                if (auto fire = trx.try_recv()) {
                    on_timer(*fire.value);
                    continue;
                }
                auto m = inbox.try_recv();
                if (m) {
                    dispatch(std::move(*m.value));
                    continue;
                }
                if (m.status == recv_status::closed) break;
                (void)select({trx, inbox});
            }
        } catch (const stopped&) {
            why = exit_kind::stopped;
            cancel_all();
            terminate(why);
            throw;
        } catch (...) {
            cancel_all();
            terminate(exit_kind::panic);
            throw;
        }
        cancel_all();
        terminate(why);
    }

  protected:
    /// Fires handle_timer(tag) once after `d`. Returns an id for cancel().
    /// Arming a tag that is still armed replaces its timer; a fire that was
    /// already queued for a cancelled or replaced timer is dropped.
    timer_id arm_after(std::chrono::nanoseconds d, std::uint64_t tag) {
        return arm(tag, d, std::chrono::nanoseconds::zero());
    }
    /// Fires handle_timer(tag) every `period` until cancel(tag).
    timer_id arm_every(std::chrono::nanoseconds period, std::uint64_t tag) {
        return arm(tag, period, period);
    }
    /// Cancels the timer armed under `tag`: true if it was pending.
    bool cancel(std::uint64_t tag) {
        auto it = armed_.find(tag);
        if (it == armed_.end()) return false;
        bool pending = cancel_timer(it->second.id);
        armed_.erase(it);
        return pending;
    }
    /// End the server after the current callback.
    void stop() noexcept { stopping_ = true; }

    /// Inside handle_call: answer this call later (OTP's noreply + reply/2).
    /// The value handle_call returns is then discarded; answer through the
    /// returned handle when ready. Dropping it unanswered releases the
    /// caller with call_error::server_down.
    reply_to<Reply> defer_reply() {
        if (current_reply_ == nullptr)
            throw std::logic_error("smarm::gen_server::defer_reply: only inside handle_call");
        deferred_ = true;
        return std::move(*current_reply_);
    }

  private:
    void dispatch(envelope&& e) {
        if (auto* c = std::get_if<call_msg>(&e)) {
            current_reply_ = &c->reply;
            deferred_ = false;
            struct reset {
                reply_to<Reply>*& p;
                ~reset() { p = nullptr; }
            } guard{current_reply_};
            std::optional<causal::site_guard> in_site;
            if (c->site != 0) [[unlikely]]
                in_site.emplace(c->site);
            Reply r = handle_call(std::move(c->request));
            if (!deferred_) (void)c->reply.send(std::move(r));
        } else if (auto* k = std::get_if<1>(&e)) {
            handle_cast(std::move(*k));
        } else {
            handle_info(std::move(std::get<2>(e)));
        }
    }
    // A fire carries the arming it belongs to: one that fired before its
    // tag was cancelled (or re-armed) is recognised as stale and dropped,
    // never taken for the newer timer of the same tag.
    struct timer_fire {
        std::uint64_t tag;
        std::uint64_t arming;
    };
    struct armed_timer {
        timer_id id;
        std::chrono::nanoseconds period;  // zero: once
        std::uint64_t arming;
    };
    timer_id arm(std::uint64_t tag, std::chrono::nanoseconds d, std::chrono::nanoseconds period) {
        auto it = armed_.find(tag);
        if (it != armed_.end()) cancel_timer(it->second.id);  // re-arming replaces
        const std::uint64_t n = ++armings_;
        auto id = send_after(d, timers_, timer_fire{tag, n});
        armed_[tag] = {id, period, n};
        return id;
    }
    void on_timer(timer_fire f) {
        auto it = armed_.find(f.tag);
        if (it == armed_.end() || it->second.arming != f.arming) return;  // stale
        if (it->second.period > std::chrono::nanoseconds::zero()) {
            it->second.arming = ++armings_;
            it->second.id =
                send_after(it->second.period, timers_, timer_fire{f.tag, it->second.arming});
        } else {
            armed_.erase(it);
        }
        handle_timer(f.tag);
    }
    void cancel_all() noexcept {
        for (auto& [tag, t] : armed_)
            cancel_timer(t.id);
        armed_.clear();
    }

    sender<timer_fire> timers_;
    receiver<timer_fire> timer_rx_;
    std::map<std::uint64_t, armed_timer> armed_;
    std::uint64_t armings_ = 0;
    bool stopping_ = false;
    reply_to<Reply>* current_reply_ = nullptr;  // the call being handled
    bool deferred_ = false;
};

/// The address of a running server.
template <class Server>
struct server_ref {
    pid id;
    sender<typename Server::envelope> inbox;
};

/// Spawns `Server(args...)` as a new actor serving its inbox.
template <class Server, class... Args>
server_ref<Server> start(Args&&... args) {
    auto [tx, rx] = channel<typename Server::envelope>();
    auto h = spawn([rx = std::move(rx), ... args = std::forward<Args>(args)]() mutable {
        Server s(std::move(args)...);
        s.serve(std::move(rx));
    });
    server_ref<Server> ref{h.id(), std::move(tx)};
    h.detach();
    return ref;
}

/// start(), then registers the inbox under `n` on the server's behalf, so
/// the name resolves as soon as this returns. Throws std::runtime_error
/// naming `n` when a live actor already holds it (the server is stopped).
template <class Server, class... Args>
server_ref<Server> start_named(name<typename Server::envelope> n, Args&&... args) {
    auto ref = start<Server>(std::forward<Args>(args)...);
    detail::bind_started_server(ref.id, n, ref.inbox, "smarm::start_named");
    return ref;
}

namespace detail {
template <class Server>
call_result<typename Server::reply_type> call_via(const sender<typename Server::envelope>& inbox,
                                                  typename Server::call_type request,
                                                  std::chrono::nanoseconds timeout) {
    using reply = typename Server::reply_type;
    return call_with_reply<reply>(timeout, [&](reply_to<reply> to) {
        typename Server::call_msg msg{std::move(request), std::move(to), causal::handoff_site()};
        return inbox.send(typename Server::envelope(std::move(msg))).ok();
    });
}
}  // namespace detail

/// Calls a server and parks for the reply, at most `timeout`.
template <class Server>
call_result<typename Server::reply_type> call(const server_ref<Server>& ref,
                                              typename Server::call_type request,
                                              std::chrono::nanoseconds timeout) {
    return detail::call_via<Server>(ref.inbox, std::move(request), timeout);
}

/// Calls the server registered under `n` (resolved now).
template <class Server>
call_result<typename Server::reply_type> call(name<typename Server::envelope> n,
                                              typename Server::call_type request,
                                              std::chrono::nanoseconds timeout) {
    auto inbox = detail::resolve_inbox(n);
    if (!inbox) return {std::nullopt, call_error::server_down};
    return detail::call_via<Server>(*inbox, std::move(request), timeout);
}

/// Casts to a server; false when it is not running.
template <class Server>
bool cast(const server_ref<Server>& ref, typename Server::cast_type msg) {
    return ref.inbox.send(typename Server::envelope(std::in_place_index<1>, std::move(msg))).ok();
}

/// Sends an info message to a server; false when it is not running.
template <class Server>
bool send_info(const server_ref<Server>& ref, typename Server::info_type msg) {
    return ref.inbox.send(typename Server::envelope(std::in_place_index<2>, std::move(msg))).ok();
}

}  // namespace smarm
