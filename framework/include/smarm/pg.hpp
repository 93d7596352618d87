#pragma once
// smarm process groups: named sets of actors, each member publishing a typed
// inbox, for fan-out and load spreading (Erlang's pg).
//
//     constexpr smarm::group<job> workers{"workers"};
//     smarm::join(workers, inbox_tx);               // in each worker
//     smarm::dispatch(workers, job{...});           // to one member (round robin)
//     smarm::broadcast(workers, job{...});          // a copy to every member
//     if (auto m = smarm::pick_member(workers))     // or look first
//         if (m->inbox.queued() < 100) m->inbox.send(job{...});
//
// join is idempotent (joining again replaces the inbox); a member that ends
// is evicted from every group it joined, and a dead member is never
// returned, even in the instant before its eviction. dispatch with no live
// member fails with name_error::no_member and hands the message back.
//
// Thread safety: any actor may call any function; groups are per runtime.

#include <smarm/channel.hpp>
#include <smarm/pid.hpp>
#include <smarm/registry.hpp>

#include <memory>
#include <optional>
#include <string_view>
#include <typeindex>
#include <vector>

namespace smarm {

/// A process group whose members receive messages of type M.
template <class M>
struct group {
    std::string_view text;
    constexpr explicit group(std::string_view t) noexcept : text(t) {}
};

namespace detail {
void pg_join(std::string_view g, std::type_index type, std::shared_ptr<void> tx,
             queue_prober probe);
bool pg_leave(std::string_view g);
std::vector<pid> pg_members(std::string_view g, std::type_index type);
/// Every live member and its inbox, in join order (a snapshot).
std::vector<resolved_name> pg_all(std::string_view g, std::type_index type);
/// The next live member (round robin) and its inbox, or nothing.
std::optional<resolved_name> pg_pick(std::string_view g, std::type_index type);
}  // namespace detail

/// The calling actor joins `g`, receiving on `tx`.
template <class M>
void join(group<M> g, sender<M> tx) {
    detail::pg_join(g.text, typeid(M), std::make_shared<sender<M>>(std::move(tx)),
                    &detail::sender_probe<M>);
}
/// The calling actor leaves `g`; false if it was not a member.
template <class M>
bool leave(group<M> g) {
    return detail::pg_leave(g.text);
}
/// Live members, in join order.
template <class M>
std::vector<pid> members(group<M> g) {
    return detail::pg_members(g.text, typeid(M));
}
/// A member of a group<M> as pick_member returns it: its pid and the inbox
/// it joined with.
template <class M>
struct group_member {
    pid id;
    sender<M> inbox;
};
/// One live member (round robin) and its inbox, if any: for callers that
/// look at the member before sending (its queue length, say) or send to it
/// more than once.
template <class M>
std::optional<group_member<M>> pick_member(group<M> g) {
    auto r = detail::pg_pick(g.text, typeid(M));
    if (!r) return std::nullopt;
    return group_member<M>{r->holder, *static_cast<const sender<M>*>(r->tx.get())};
}
/// One live member (round robin), if any.
template <class M>
std::optional<pid> pick(group<M> g) {
    auto r = detail::pg_pick(g.text, typeid(M));
    if (!r) return std::nullopt;
    return r->holder;
}
/// Sends `msg` to one live member (round robin).
template <class M>
name_send_result<M> dispatch(group<M> g, M msg) {
    auto r = detail::pg_pick(g.text, typeid(M));
    if (!r) return {name_error::no_member, std::move(msg)};
    auto sent = static_cast<const sender<M>*>(r->tx.get())->send(std::move(msg));
    if (!sent.ok()) return {name_error::closed, std::move(sent.returned)};
    return {};
}

/// Sends a copy of `msg` to every live member, in join order (a snapshot
/// taken first: a member joining meanwhile gets nothing); returns how many
/// took it. Each member's copy arrives in the order this caller broadcast
/// them (a channel is FIFO per sender). Share a large payload (M =
/// std::shared_ptr<const T>) rather than copy it per member.
/// With `max_queued`, a member whose inbox already holds that many is
/// skipped (a slow consumer does not grow without bound); the member can
/// tell, since its queue only shrinks when it receives: finding
/// queued() >= max_queued means it may have missed a message.
template <class M>
std::size_t broadcast(group<M> g, const M& msg,
                      std::size_t max_queued = static_cast<std::size_t>(-1)) {
    std::size_t delivered = 0;
    for (const auto& r : detail::pg_all(g.text, typeid(M))) {
        const auto* tx = static_cast<const sender<M>*>(r.tx.get());
        if (max_queued != static_cast<std::size_t>(-1) && tx->queued() >= max_queued) continue;
        delivered += tx->send(M(msg)).ok() ? 1 : 0;
    }
    return delivered;
}

}  // namespace smarm
