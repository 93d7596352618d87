#pragma once
// The kv service: a gen_server holding keys and values, reached over HTTP
// through registry-routed routes (the server's call type is http::request).
//
//   GET    /kv/{key}   200 with the stored bytes, or 404
//   PUT    /kv/{key}   201 when new, 204 when replaced; 413 past value_limit
//   DELETE /kv/{key}   204, or 404
//   GET    /kv         the keys in order, paginated: ?limit=N (default 100,
//                      at most 1000) &after=KEY; JSON {"keys":[...],"next":K}
//                      where "next" (present when more remain) is the
//                      `after` of the following page
//
// Run it as a supervised child (kv_child) so a crash restarts it; while it
// is down, its routes answer 503 (the router's registry-routed handling).
//
// Durability (kv_options::log_path): a write is appended to the log (and
// fdatasync'd with sync_mode::always) on the blocking pool before it is
// applied and acknowledged; a write the log refuses is answered 503 and
// not applied (the log cuts it back: kv/log.hpp). With sync_mode::group a
// write is applied, visible to reads and acknowledged only after its
// group's fdatasync; a failed sync answers the whole group 503. The group's
// sync runs in an actor of its own while the server keeps answering reads
// (a read never waits for the disk in group mode); writes that arrive
// meanwhile are held and join the next group, so the log's writes and
// syncs never overlap. Restarts
// replay the log. kv_child opens the log before taking the name, retrying
// errors that can clear (EMFILE, ENOSPC, EIO, ...) with backoff, so kv
// answers 503 until it can serve and the rest of the server is unaffected.

#include <smarm/gen_server.hpp>
#include <smarm/http/message.hpp>
#include <smarm/http/router.hpp>
#include <smarm/supervisor.hpp>

#include "kv/log.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace smarm::services {

struct kv_options {
    std::uint64_t value_limit = 1024 * 1024;  ///< bytes per value (else 413)
    std::chrono::nanoseconds call_timeout = std::chrono::seconds(2);  ///< per request
    std::string log_path;                    ///< append-only log ("" = in memory only)
    sync_mode sync = sync_mode::always;      ///< what an acknowledged write survives
    std::uint64_t compact_bytes = 64 << 20;  ///< compact a log larger than this
    /// sync_mode::group: writes acknowledged together after one fdatasync
    /// at most this long after the first of them.
    std::chrono::nanoseconds group_interval = std::chrono::milliseconds(5);
};

/// What a group's sync actor tells the kv server (sync_mode::group).
struct kv_group_synced {
    std::optional<std::string> error;  ///< why the sync failed (nullopt: it succeeded)
};

class kv_server
    : public gen_server<http::request, http::response, std::monostate, kv_group_synced> {
  public:
    /// Opens and replays the log when one is configured (on the blocking
    /// pool; call from the server's actor). Throws std::system_error.
    explicit kv_server(kv_options o);
    /// The sending end of the inbox this server serves: with it a group's
    /// sync runs beside the server (reads go on); without it the server
    /// waits for each group's sync itself. kv_child gives it.
    void set_inbox(sender<envelope> self) { self_ = std::move(self); }
    http::response handle_call(http::request req) override;
    void handle_timer(std::uint64_t tag) override;
    void handle_info(kv_group_synced done) override;
    std::size_t size() const noexcept { return data_.size(); }

  private:
    /// A PUT or DELETE: its answer, and whether that answer must wait for
    /// the group's sync (group mode: it is staged).
    std::pair<http::response, bool> write(http::request& req);
    /// Queues a staged write's answer for after its group's sync.
    void answer_after_sync(reply_to<http::response> to, http::response r);
    http::response list(const http::request& req) const;
    /// Runs a log write on the blocking pool: nullopt when it succeeded (or
    /// there is no log), else why it failed (logged). `what` names it in the
    /// warning logged when it takes a second or longer.
    template <class F>
    std::optional<std::string> logged(const char* what, F&& write);
    http::response storage_failed(const std::string& why) const;
    void compact();
    /// The value a new write sees: staged (group mode) over acknowledged.
    const std::string* current(std::string_view key) const;
    bool staging() const noexcept { return log_ && opts_.sync == sync_mode::group; }

    kv_options opts_;
    std::map<std::string, std::string, std::less<>> data_;  ///< acknowledged
    // Shared with a group's sync actor, which may outlive a stopped server.
    std::shared_ptr<kv_log> log_;
    sender<envelope> self_;
    // Group commit: writes logged but not yet synced, with the answers their
    // callers wait for, and their net effect per key (nullopt: deleted).
    // Applied to data_ only after the sync, so a read never sees a write
    // that a failed sync could still take back.
    using answers = std::vector<std::pair<reply_to<http::response>, http::response>>;
    using effects = std::map<std::string, std::optional<std::string>, std::less<>>;
    answers unsynced_;
    effects staged_;
    bool group_armed_ = false;
    // The group whose sync is running (syncing_): its answers and effects,
    // and the writes held until it ends (they must not reach the log
    // while it syncs: a failed sync cuts the log back to its last sync).
    bool syncing_ = false;
    answers in_sync_;
    effects in_sync_staged_;
    std::vector<std::pair<http::request, reply_to<http::response>>> held_;
    void finish_group(const std::optional<std::string>& error);
};

/// The name the kv server registers its inbox under.
inline constexpr name<kv_server::envelope> kv_name{"kv"};

/// A supervisor child running the kv server under kv_name.
child_spec kv_child(kv_options o);

/// Adds the kv routes to `r`.
void add_kv_routes(http::router& r, const kv_options& o);

}  // namespace smarm::services
