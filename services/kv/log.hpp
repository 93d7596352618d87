#pragma once
// The kv service's append-only log: every acknowledged write is in it before
// the reply goes out, and a restart replays it.
//
// Record: [u32 body length][u32 CRC-32 of the body] then the body:
// [u8 op (1 put, 2 delete)][u32 key length][key][value]. Integers are
// little-endian. Replay reads records in order; the first record that is
// short (a torn tail from a crash mid-write) or whose checksum does not
// match ends the log: the file is truncated there (and the truncation
// logged), so a torn record is never mis-read and later appends start on a
// record boundary.
//
// Compaction rewrites the live map into a fresh file next to the log and
// renames it over the log (atomic on POSIX), once the log has grown past
// `compact_bytes` and is at least twice the live data.
//
// The methods do blocking file IO: call them through smarm::block_on_io
// (kv_server does) so a scheduler thread never waits on the disk.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace smarm::services {

enum class sync_mode {
    none,    ///< write(2) before the reply: survives a process crash, not power loss
    always,  ///< write(2) + fdatasync(2) before the reply
    group,   ///< write(2) now; one fdatasync per group interval, then the replies
};

class kv_log {
  public:
    /// Opens (creating) the log at `path` and replays it into `out`. Throws
    /// std::system_error naming the path.
    kv_log(std::string path, sync_mode mode, std::uint64_t compact_bytes,
           std::map<std::string, std::string, std::less<>>& out);
    ~kv_log();
    kv_log(const kv_log&) = delete;
    kv_log& operator=(const kv_log&) = delete;

    /// Appends (and syncs, per the mode). Throws std::system_error.
    void put(std::string_view key, std::string_view value);
    void erase(std::string_view key);
    /// fdatasync (group mode calls it once per group). Throws std::system_error.
    void sync();
    /// Rewrites the log from `live` when it is due (see the header comment).
    void maybe_compact(const std::map<std::string, std::string, std::less<>>& live);

    std::uint64_t size() const noexcept { return size_; }
    /// Bytes dropped from a torn tail at open (0 when the log was clean).
    std::uint64_t truncated() const noexcept { return truncated_; }

  private:
    void append(char op, std::string_view key, std::string_view value);

    std::string path_;
    sync_mode mode_;
    std::uint64_t compact_bytes_;
    int fd_ = -1;
    std::uint64_t size_ = 0;
    std::uint64_t live_bytes_ = 0;
    std::uint64_t truncated_ = 0;
};

}  // namespace smarm::services
