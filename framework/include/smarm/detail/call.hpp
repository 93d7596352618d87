#pragma once
// Pieces shared by gen_server and gen_statem: the call result type, waiting
// for a reply, and binding a freshly started server's inbox to a name.

#include <smarm/channel.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>

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

/// Parks for the reply on `rx`, at most `timeout`. The only reply sender
/// travels with the request, so a server that dies or drops the request
/// closes the channel and the caller learns it at once (server_down).
template <class Reply>
call_result<Reply> await_reply(const receiver<Reply>& rx, std::chrono::nanoseconds timeout) {
    auto r = rx.recv_timeout(timeout);
    if (r) return {std::move(r.value), std::nullopt};
    return {std::nullopt,
            r.status == recv_status::timeout ? call_error::timeout : call_error::server_down};
}

/// Binds `n` to `inbox` on behalf of the server actor `holder`, so the name
/// resolves as soon as the starter returns. When a live actor already holds
/// the name, the new server is stopped and std::runtime_error names `n`.
template <class Env>
void bind_started_server(pid holder, name<Env> n, const sender<Env>& inbox, const char* who) {
    if (registry_bind_for(holder, n.text, typeid(Env), std::make_shared<sender<Env>>(inbox),
                          &sender_depth<Env>))
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
