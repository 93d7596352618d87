#pragma once
// smarm registry: actors publish typed inboxes under names.
//
//     constexpr smarm::name<request> kv{"kv"};
//     smarm::register_name(kv, tx);                 // inside the kv actor
//     auto r = smarm::send(kv, request{...});       // anywhere, resolved now
//
// A binding keeps the holder's full pid (index + generation), so a holder
// that died is recognised even after its slot hosts another actor; dead
// holders are pruned when a call meets them. Sends resolve the name on every
// call. Errors hand the message back. An actor may publish any number of
// names (each with its own message type).
//
// Thread safety: every call may be made from any actor; the registry is
// per runtime and emptied when run() returns.

#include <smarm/channel.hpp>
#include <smarm/pid.hpp>
#include <smarm/runtime.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeindex>
#include <vector>

namespace smarm {

/// A registered name for an inbox of messages of type M.
template <class M>
struct name {
    std::string_view text;
    constexpr explicit name(std::string_view t) noexcept : text(t) {}
};

enum class name_error {
    unresolved,  ///< nothing is registered under the name
    dead,        ///< the holder has ended (the binding was pruned)
    no_channel,  ///< the name is bound to an inbox of another message type
    closed,      ///< the holder dropped its receiver
    no_member,   ///< (process groups) the group has no live member
};

/// "unresolved", "dead", ...
const char* to_string(name_error e) noexcept;

/// Result of send(name, msg): ok, or the error and the message handed back.
template <class M>
struct [[nodiscard]] name_send_result {
    std::optional<name_error> error;
    std::optional<M> returned;
    bool ok() const noexcept { return !error.has_value(); }
    explicit operator bool() const noexcept { return ok(); }
};

namespace detail {
struct resolved_name {
    pid holder;
    std::shared_ptr<void> tx;  ///< a sender<M>
};
struct name_lookup {
    std::optional<resolved_name> found;
    name_error error = name_error::unresolved;
};
/// Reads a bound sender's queue for introspection.
using queue_prober = queue_probe (*)(const void* tx);
bool registry_bind(std::string_view n, std::type_index type, std::shared_ptr<void> tx,
                   queue_prober probe);
bool registry_bind_for(pid holder, std::string_view n, std::type_index type,
                       std::shared_ptr<void> tx, queue_prober probe);
name_lookup registry_resolve(std::string_view n, std::type_index type);
bool registry_unbind(std::string_view n);
template <class M>
queue_probe sender_probe(const void* tx) {
    return static_cast<const sender<M>*>(tx)->probe();
}
}  // namespace detail

/// Binds `n` to `tx`, held by the calling actor. False when a live actor
/// already holds the name (a dead holder's binding is replaced).
template <class M>
bool register_name(name<M> n, sender<M> tx) {
    return detail::registry_bind(n.text, typeid(M), std::make_shared<sender<M>>(std::move(tx)),
                                 &detail::sender_probe<M>);
}

/// The live holder of `n`, if any.
template <class M>
std::optional<pid> whereis(name<M> n) {
    auto r = detail::registry_resolve(n.text, typeid(M));
    if (!r.found) return std::nullopt;
    return r.found->holder;
}

/// Sends `msg` to whoever holds `n` now.
template <class M>
name_send_result<M> send(name<M> n, M msg) {
    auto r = detail::registry_resolve(n.text, typeid(M));
    if (!r.found) return {r.error, std::move(msg)};
    auto sent = static_cast<const sender<M>*>(r.found->tx.get())->send(std::move(msg));
    if (!sent.ok()) return {name_error::closed, std::move(sent.returned)};
    return {};
}

/// Spawns `f(receiver<M>)` as a new actor and returns its handle and the
/// address (sender) of the inbox it was given, so the caller can talk to it
/// at once. Register the address under a name to make it resolvable.
template <class M, class F>
std::pair<join_handle, sender<M>> spawn_addr(F&& f) {
    auto [tx, rx] = channel<M>();
    auto h = spawn([f = std::forward<F>(f), rx = std::move(rx)]() mutable { f(std::move(rx)); });
    return {std::move(h), std::move(tx)};
}

/// Removes the binding of `n` (whoever holds it). False when there was none.
template <class M>
bool unregister(name<M> n) {
    return detail::registry_unbind(n.text);
}

}  // namespace smarm
