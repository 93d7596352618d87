#pragma once
// Where the reply to an actor's current call lands: one cell per actor slot,
// reused by every call the slot's actors make, so a call allocates nothing
// for its reply. Not a user API (see smarm::reply_to in detail/call.hpp).
//
// Protocol (every field guarded by `mu`):
// - The caller opens a call: a new id (`call`, never reused, never reset,
//   not even when the slot gets a new tenant), `dest` = a std::optional<R>
//   in its own frame, state waiting. It registers (waiter, epoch) before each
//   park, exactly like a channel receiver.
// - The server's reply_to holds (cell, id). It writes only while the cell
//   still shows that id in state waiting: it constructs the reply in `dest`
//   (replied) or, dropped unanswered, marks it dropped; then it unparks the
//   waiter. Either way the handle is spent and never touches the cell again.
// - A caller that leaves without an answer (timeout, stop, failed send)
//   sets the state back to idle before its frame goes away, so a late reply
//   finds no open call and is discarded.
// The cell lives as long as the runtime's slot table: a reply_to must not
// outlive the runtime that made it.

#include <smarm/pid.hpp>

#include <cstdint>

#include <smarm/detail/spinlock.hpp>

namespace smarm::detail {

struct reply_cell {
    enum class state : std::uint8_t { idle, waiting, replied, dropped };
    spinlock mu;
    state st = state::idle;
    std::uint64_t call = 0;  ///< id of the newest call
    void* dest = nullptr;    ///< the caller's std::optional<Reply> while waiting
    pid waiter;              ///< registered before each park
    std::uint32_t epoch = 0;
    std::uint32_t flow = 0;  ///< the reply's trace flow (smarm/trace.hpp), 0: none
};

/// The calling actor's reply cell and pid. Throws std::logic_error naming
/// `call` outside an actor.
struct reply_cell_ref {
    reply_cell* cell;
    pid self;
};
reply_cell_ref current_reply_cell(const char* call);

}  // namespace smarm::detail
