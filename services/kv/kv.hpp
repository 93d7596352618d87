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
// group's fdatasync; a failed sync answers the whole group 503. Restarts
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

class kv_server : public gen_server<http::request, http::response> {
  public:
    /// Opens and replays the log when one is configured (on the blocking
    /// pool; call from the server's actor). Throws std::system_error.
    explicit kv_server(kv_options o);
    http::response handle_call(http::request req) override;
    void handle_timer(std::uint64_t tag) override;
    std::size_t size() const noexcept { return data_.size(); }

  private:
    http::response list(const http::request& req) const;
    /// Runs a log write on the blocking pool: nullopt when it succeeded (or
    /// there is no log), else why it failed (logged). `what` names it in the
    /// warning logged when it takes slow_io or longer.
    template <class F>
    std::optional<std::string> logged(const char* what, F&& write);
    static constexpr std::chrono::seconds slow_io{1};
    http::response storage_failed(const std::string& why) const;
    void compact();
    /// The value a new write sees: staged (group mode) over acknowledged.
    const std::string* current(std::string_view key) const;
    bool staging() const noexcept { return log_ && opts_.sync == sync_mode::group; }
    /// Group mode: the reply waits for the group's fdatasync.
    http::response stage(http::response r);

    kv_options opts_;
    std::map<std::string, std::string, std::less<>> data_;  ///< acknowledged
    std::unique_ptr<kv_log> log_;
    // Group commit: writes logged but not yet synced, with the answers their
    // callers wait for, and their net effect per key (nullopt: deleted).
    // Applied to data_ only after the sync, so a read never sees a write
    // that a failed sync could still take back.
    std::vector<std::pair<reply_to<http::response>, http::response>> unsynced_;
    std::map<std::string, std::optional<std::string>, std::less<>> staged_;
    bool group_armed_ = false;
};

/// The name the kv server registers its inbox under.
inline constexpr name<kv_server::envelope> kv_name{"kv"};

/// A supervisor child running the kv server under kv_name.
child_spec kv_child(kv_options o);

/// Adds the kv routes to `r`.
void add_kv_routes(http::router& r, const kv_options& o);

}  // namespace smarm::services
