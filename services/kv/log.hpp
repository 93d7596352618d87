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
// A failed write or sync leaves the log as it was before it. Records are
// written at an explicit offset (the end of the last whole record), and on
// any failure the file is cut back there and the cut synced before the
// error is reported: a torn or unsynced record can never sit in front of a
// later acknowledged one (replay would stop at it and drop everything
// after), and a write answered as failed is not found after a restart. A
// failed fdatasync is never retried into a success: the records it covered
// are cut, because after such a failure the kernel may have dropped their
// dirty pages (PostgreSQL's "fsyncgate"). When the cut itself fails, the log
// is `damaged()`: every write is refused until a later cut succeeds, and
// the failed write's outcome is unknown (a restart may find it).
//
// Compaction rewrites the live map into a fresh file next to the log,
// syncs it, renames it over the log (atomic on POSIX) and syncs the
// directory, once the log has grown past `compact_bytes` and is at least
// twice the live data. A failure before the rename leaves the old log in
// place; a failed directory sync after it refuses writes until a retry of
// that sync succeeds (until then the rename may not survive a crash, and
// writes appended to the new file would be lost with it).
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

    /// Appends (and syncs with sync_mode::always). Throws std::system_error,
    /// having cut the log back to where it was (see the header comment).
    void put(std::string_view key, std::string_view value);
    void erase(std::string_view key);
    /// fdatasync of every record appended since the last sync (group mode
    /// calls it once per group). On failure those records are cut from the
    /// log, then std::system_error is thrown.
    void sync();
    /// Rewrites the log from `live` when it is due (see the header comment).
    /// `live` must hold exactly what the log holds: in group mode call it
    /// only right after a successful sync(). Throws std::system_error; the
    /// log then stays as it was.
    void maybe_compact(const std::map<std::string, std::string, std::less<>>& live);

    std::uint64_t size() const noexcept { return size_; }
    /// Bytes dropped from a torn tail at open (0 when the log was clean).
    std::uint64_t truncated() const noexcept { return truncated_; }
    /// True while a failed write could not be cut back (or a compaction's
    /// directory sync failed): writes are refused until it is repaired.
    bool damaged() const noexcept { return torn_ || dir_unsynced_; }

  private:
    /// Reads the file into `out`, cuts a torn tail; returns the end of the
    /// last whole record.
    std::uint64_t replay(std::map<std::string, std::string, std::less<>>& out);
    void append(char op, std::string_view key, std::string_view value);
    /// Throws unless the log is sound, repairing it first if it can.
    void ensure_sound();
    /// Cuts the file back to `at` and syncs the cut; false (and torn_) when
    /// either fails.
    bool cut_to(std::uint64_t at) noexcept;
    bool sync_dir() noexcept;

    std::string path_;
    sync_mode mode_;
    std::uint64_t compact_bytes_;
    int fd_ = -1;
    std::uint64_t size_ = 0;    // end of the last whole record written
    std::uint64_t synced_ = 0;  // end of the last record known durable
    std::uint64_t truncated_ = 0;
    std::uint64_t next_compact_ = 0;  // no compaction attempt below this size
    bool torn_ = false;               // bytes past size_ may be in the file
    bool dir_unsynced_ = false;       // a compaction's rename is not yet durable
};

}  // namespace smarm::services
