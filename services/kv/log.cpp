#include "log.hpp"

#include <spdlog/spdlog.h>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <system_error>
#include <vector>

namespace smarm::services {

namespace {

constexpr char op_put = 1;
constexpr char op_erase = 2;
constexpr std::size_t head_size = 8;  // body length + CRC

[[noreturn]] void fail(const std::string& what, const std::string& path) {
    throw std::system_error(errno, std::generic_category(), "kv log " + path + ": " + what);
}

void put_u32(std::string& out, std::uint32_t v) {
    for (int i = 0; i < 4; ++i)
        out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint32_t get_u32(const char* p) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
        v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    return v;
}

std::uint32_t checksum(std::string_view body) {
    return static_cast<std::uint32_t>(
        ::crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
}

std::string record(char op, std::string_view key, std::string_view value) {
    std::string body;
    body.reserve(5 + key.size() + value.size());
    body += op;
    put_u32(body, static_cast<std::uint32_t>(key.size()));
    body.append(key);
    body.append(value);
    std::string out;
    out.reserve(head_size + body.size());
    put_u32(out, static_cast<std::uint32_t>(body.size()));
    put_u32(out, checksum(body));
    out += body;
    return out;
}

/// Writes all of `data` at `off` (EINTR and short writes retried); on
/// failure errno is the cause.
bool write_at(int fd, std::string_view data, std::uint64_t off) {
    while (!data.empty()) {
        ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off));
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        if (n == 0) {  // pwrite makes no progress only on a full device
            errno = ENOSPC;
            return false;
        }
        data.remove_prefix(static_cast<std::size_t>(n));
        off += static_cast<std::uint64_t>(n);
    }
    return true;
}

std::string read_file(int fd, const std::string& path) {
    std::string all;
    char buf[1 << 16];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("read", path);
        }
        if (n == 0) return all;
        all.append(buf, static_cast<std::size_t>(n));
    }
}

}  // namespace

kv_log::kv_log(std::string path, sync_mode mode, std::uint64_t compact_bytes,
               std::map<std::string, std::string, std::less<>>& out)
    : path_(std::move(path)), mode_(mode), compact_bytes_(compact_bytes) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("open", path_);
    // A compaction that died before its rename left only garbage.
    (void)::unlink((path_ + ".compact").c_str());
    try {
        size_ = replay(out);
    } catch (...) {
        ::close(fd_);  // no destructor runs for a constructor that throws
        throw;
    }
    synced_ = size_;
    next_compact_ = compact_bytes_;
}

std::uint64_t kv_log::replay(std::map<std::string, std::string, std::less<>>& out) {
    const std::string all = read_file(fd_, path_);
    std::size_t at = 0;
    while (at + head_size <= all.size()) {
        const std::uint32_t len = get_u32(all.data() + at);
        const std::uint32_t crc = get_u32(all.data() + at + 4);
        if (len < 5 || at + head_size + len > all.size()) break;  // torn
        std::string_view body(all.data() + at + head_size, len);
        if (checksum(body) != crc) break;  // torn or corrupt: stop here
        const char op = body[0];
        const std::uint32_t klen = get_u32(body.data() + 1);
        if (klen > len - 5 || (op != op_put && op != op_erase)) break;
        std::string key(body.substr(5, klen));
        if (op == op_put)
            out.insert_or_assign(std::move(key), std::string(body.substr(5 + klen)));
        else
            out.erase(key);
        at += head_size + len;
    }
    if (at != all.size()) {
        truncated_ = all.size() - at;
        spdlog::warn("kv log {}: dropping a torn or corrupt tail of {} bytes at offset {}", path_,
                     truncated_, at);
        if (::ftruncate(fd_, static_cast<off_t>(at)) != 0) fail("truncate", path_);
        if (::fdatasync(fd_) != 0) fail("fdatasync", path_);
    }
    return at;
}

kv_log::~kv_log() {
    if (fd_ >= 0) ::close(fd_);
}

bool kv_log::cut_to(std::uint64_t at) noexcept {
    const int saved = errno;
    torn_ = ::ftruncate(fd_, static_cast<off_t>(at)) != 0 || ::fdatasync(fd_) != 0;
    if (torn_)
        spdlog::error("kv log {}: cannot cut back to offset {} ({}); writes are refused until it "
                      "can be",
                      path_, at, std::strerror(errno));
    errno = saved;
    return !torn_;
}

bool kv_log::sync_dir() noexcept {
    const std::string dir = path_.substr(0, path_.find_last_of('/') + 1);
    const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return false;
    const bool ok = ::fsync(dfd) == 0;
    const int saved = errno;
    ::close(dfd);
    errno = saved;
    return ok;
}

void kv_log::ensure_sound() {
    if (torn_ && !cut_to(size_)) fail("repair after a failed write", path_);
    if (dir_unsynced_) {
        if (!sync_dir()) fail("directory sync after compaction", path_);
        dir_unsynced_ = false;
    }
}

void kv_log::append(char op, std::string_view key, std::string_view value) {
    ensure_sound();
    const std::string rec = record(op, key, value);
    if (!write_at(fd_, rec, size_)) {
        const int err = errno;
        cut_to(size_);  // a short write leaves a torn record
        errno = err;
        fail("write", path_);
    }
    if (mode_ == sync_mode::always && ::fdatasync(fd_) != 0) {
        const int err = errno;
        cut_to(size_);  // never retried: the pages may be gone
        errno = err;
        fail("fdatasync", path_);
    }
    size_ += rec.size();
    if (mode_ != sync_mode::group) synced_ = size_;
}

void kv_log::sync() {
    ensure_sound();
    if (synced_ == size_) return;
    if (::fdatasync(fd_) != 0) {
        const int err = errno;
        size_ = synced_;
        cut_to(size_);
        errno = err;
        fail("fdatasync", path_);
    }
    synced_ = size_;
}

void kv_log::put(std::string_view key, std::string_view value) {
    append(op_put, key, value);
}

void kv_log::erase(std::string_view key) {
    append(op_erase, key, {});
}

void kv_log::maybe_compact(const std::map<std::string, std::string, std::less<>>& live) {
    // Unsynced records would be dropped by the rewrite (it holds `live`).
    if (size_ < next_compact_ || damaged() || synced_ != size_) return;
    std::uint64_t need = 0;
    for (auto& [k, v] : live)
        need += head_size + 5 + k.size() + v.size();
    if (size_ < 2 * need) {  // not yet: look again once it could be due
        next_compact_ = std::max(compact_bytes_, 2 * need);
        return;
    }
    const std::string tmp = path_ + ".compact";
    // Whatever fails before the rename leaves the log as it was; the next
    // attempt waits until the log has grown by another quarter of the
    // threshold (a full disk must not make every write rewrite the map).
    int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    auto give_up = [&](const char* what) {
        const int err = errno;
        if (fd >= 0) {
            ::close(fd);
            ::unlink(tmp.c_str());
        }
        next_compact_ = size_ + compact_bytes_ / 4;
        errno = err;
        fail(what, tmp);
    };
    if (fd < 0) give_up("open");
    std::string chunk;
    std::uint64_t off = 0;
    for (auto& [k, v] : live) {
        chunk += record(op_put, k, v);
        if (chunk.size() >= (1 << 20)) {
            if (!write_at(fd, chunk, off)) give_up("write");
            off += chunk.size();
            chunk.clear();
        }
    }
    if (!write_at(fd, chunk, off)) give_up("write");
    off += chunk.size();
    if (::fdatasync(fd) != 0) give_up("fdatasync");
    if (::rename(tmp.c_str(), path_.c_str()) != 0) give_up("rename");
    // The new file is the log now (same inode as `fd`).
    ::close(fd_);
    fd_ = fd;
    spdlog::info("kv log {}: compacted {} -> {} bytes", path_, size_, off);
    size_ = synced_ = off;
    next_compact_ = std::max(compact_bytes_, 2 * off);
    if (!sync_dir()) {
        dir_unsynced_ = true;
        fail("directory sync after compaction (writes refused until it succeeds)", path_);
    }
}

}  // namespace smarm::services
