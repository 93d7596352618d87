#pragma once
// smarm::trace — a scheduler and message tracer, exported as Chrome
// trace-event JSON (Perfetto, chrome://tracing).
//
// What is recorded, each as one fixed-size event (32 bytes) into the
// recording thread's own ring buffer: an actor's run on a scheduler thread
// (resume .. switch-out, with why it left: yield, preempted, park with the
// wait's reason and fd, finish, handoff), spawn (with the parent), exit
// (normal, exception, stopped), a message's send and its receive (a flow
// from the sender's run to the receiver's; a gen_server call's reply is a
// flow too), IO readiness delivered, a timer fired, a supervisor restart,
// spans an actor opens (an HTTP request on its connection actor: method,
// route pattern, status, bytes), and counters (run-queue length, live
// actors) sampled by each scheduler at most once a millisecond.
//
// Modes: off (the default: every event site is one relaxed load), an
// interval recording (start() .. stop(): a thread whose buffer fills stops
// recording and counts what it dropped, so the start is kept), or a flight
// recorder (options::flight: each thread keeps its newest events,
// overwriting the oldest and counting them). -DSMARM_TRACE=OFF compiles the
// event sites out (SMARM_TRACE_ENABLED 0); the functions stay and record
// nothing.
//
// Export reads the buffers while threads keep recording (each ring is a
// single-writer sequence: the reader copies, then re-reads the writer's
// position and discards what may have been overwritten meanwhile, counted as
// dropped). The JSON has one track per recording thread ("M" thread names),
// each actor run as an "X" slice (they nest strictly: a thread runs one
// actor at a time), each actor's lifetime, its waits and its spans as
// nestable async events ("b"/"e", id = the pid) on one track per actor,
// flows ("s"/"f") for messages whose send and receive were both recorded,
// and "C" counters. A size cap (export_options::max_bytes, default 64 MiB)
// keeps the newest events; `otherData` in the file states the cut and the
// dropped counts.
//
// Thread safety: every function may be called from any thread, inside an
// actor or not. start/stop/dump are meant for one controller at a time
// (concurrent calls are serialised, not merged).

#include <smarm/pid.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include <smarm/detail/hooks.hpp>

#ifndef SMARM_TRACE_ENABLED
#define SMARM_TRACE_ENABLED 1
#endif

namespace smarm::trace {

struct options {
    /// Ring size per recording thread, in bytes (32 per event), rounded up
    /// to a power of two. At least 64 KiB, at most 1 GiB.
    std::size_t buffer_bytes = std::size_t{8} << 20;
    /// Flight recorder: keep the newest events and overwrite the oldest.
    /// Otherwise a full ring stops its thread's recording (the interval's
    /// start is kept).
    bool flight = false;
};

/// Starts a recording; one already running is discarded and replaced.
/// Buffers are allocated per thread at its first event. Inside an actor,
/// the names registered so far are captured (later ones as they register).
/// std::invalid_argument naming the field for a size out of range.
void start(const options& opts = {});
/// Stops recording; what was recorded stays readable until the next start.
void stop() noexcept;
/// True between start() and stop().
bool recording() noexcept;

struct export_options {
    /// The most JSON written, in bytes (at least 4 KiB); the oldest events
    /// are left out to stay under it.
    std::size_t max_bytes = std::size_t{64} << 20;
};

/// What an export wrote.
struct summary {
    std::uint64_t events = 0;   ///< trace events in the JSON (metadata included)
    std::uint64_t records = 0;  ///< recorded events read from the buffers
    std::uint64_t dropped = 0;  ///< recorded, but overwritten or refused by a full ring
    std::uint64_t cut = 0;      ///< events left out by the size cap (records not rendered included)
    std::size_t bytes = 0;      ///< JSON bytes written
    unsigned threads = 0;       ///< thread tracks
};

/// Writes the Chrome trace-event JSON of what the buffers hold now
/// (recording or not). Never throws on a stream error: check the stream.
summary write_json(std::ostream& out, const export_options& opts = {});
/// The same into a string.
std::string to_json(const export_options& opts = {}, summary* result = nullptr);
/// The same into `path` (replaced). std::system_error naming the path when
/// it cannot be written.
summary dump(const std::string& path, const export_options& opts = {});

/// Interns `s` (copied; never freed) for span names; the same string gives
/// the same id. Takes a lock: call it once per name, not per event.
std::uint32_t intern(std::string_view s);
/// The calling thread's track name in traces ("scheduler 0", "epoll", ...).
void name_thread(std::string_view name);

/// The calling actor opens a span on its track (an HTTP request, say):
/// `name` and `detail` are intern() ids (detail 0: none). Spans nest; one
/// left open when the actor exits is closed there.
void span_begin(std::uint32_t name, std::uint32_t detail = 0) noexcept;
/// Closes the innermost open span with a status and a byte count.
void span_end(std::uint32_t status = 0, std::uint64_t bytes = 0) noexcept;

}  // namespace smarm::trace

namespace smarm::detail {

/// Is an event site live (detail::hook_trace set while recording)? One
/// relaxed load; false when compiled out.
[[gnu::always_inline]] inline bool trace_active() noexcept {
#if SMARM_TRACE_ENABLED
    return hooks_on(hook_trace);
#else
    return false;
#endif
}

/// A fresh flow id (31 bits, never 0), recording nothing.
std::uint32_t trace_flow_id() noexcept;
/// Records a message send by the calling actor (or thread): `flow` non-zero
/// is a queued message whose receive records trace_recv(flow); 0 is a
/// message handed to the parked receiver `to`, whose next run receives it.
void trace_sent(std::uint32_t flow, pid to) noexcept;
/// trace_sent(trace_flow_id(), no receiver) when recording; returns the
/// flow (0: not recorded).
std::uint64_t trace_send() noexcept;
/// Records the receive of the message sent as `flow` (non-zero).
void trace_recv(std::uint64_t flow) noexcept;
/// Records that `holder` registered `name` (while recording).
void trace_name(pid holder, std::string_view name);

}  // namespace smarm::detail
