#pragma once
// The WebSocket pub/sub example: a chat room per name. Each socket is its
// connection's actor, joined to the process group "chat/<room>"; a message
// from its client is broadcast to every member of the room (itself
// included), each member forwarding what it receives to its own client.
// smarm-server mounts it on GET /ws/chat/{room} with websocket.chat on;
// tests/websocket/chat_test.py runs 200 clients in 4 rooms.
//
//     client -> "hello"              every client of the room <- "hello"
//     (on joining)                   the new client <- "joined <room>"
//
// Messages are relayed as sent (text stays text, binary binary); the room
// adds nothing, so a client that wants a sender name sends it. Ordering:
// each member gets one sender's messages in the order that sender's client
// sent them (a channel is FIFO per sender), and every message exactly once
// while it stays joined. A member whose client reads too slowly is closed
// with 1008 once `max_backlog` messages wait for it: broadcasts skip a
// member at the bound, so a stalled reader holds at most that many (and a
// write stalls at most message_timeout), and the member, finding its queue
// at the bound, closes rather than go on with a gap.

#include <smarm/http/router.hpp>
#include <smarm/http/websocket.hpp>

#include <cstddef>

namespace chat {

/// The messages queued for one member before it is closed as too slow.
inline constexpr std::size_t max_backlog = 4096;

/// One socket's life in its room (the route's handler).
void serve(smarm::http::websocket& ws);

/// GET /ws/chat/{room}.
inline void add_routes(smarm::http::router& r) {
    r.websocket("/ws/chat/{room}", serve);
}

}  // namespace chat
