#include "log.hpp"

#include <spdlog/spdlog.h>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

void write_all(int fd, std::string_view data, const std::string& path) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("write", path);
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
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
    if (::lseek(fd_, static_cast<off_t>(at), SEEK_SET) < 0) fail("seek", path_);
    size_ = at;
    for (auto& [k, v] : out)
        live_bytes_ += head_size + 5 + k.size() + v.size();
}

kv_log::~kv_log() {
    if (fd_ >= 0) ::close(fd_);
}

void kv_log::append(char op, std::string_view key, std::string_view value) {
    const std::string rec = record(op, key, value);
    write_all(fd_, rec, path_);
    if (mode_ == sync_mode::always && ::fdatasync(fd_) != 0) fail("fdatasync", path_);
    size_ += rec.size();
}

void kv_log::sync() {
    if (::fdatasync(fd_) != 0) fail("fdatasync", path_);
}

void kv_log::put(std::string_view key, std::string_view value) {
    append(op_put, key, value);
    live_bytes_ += head_size + 5 + key.size() + value.size();
}

void kv_log::erase(std::string_view key) {
    append(op_erase, key, {});
}

void kv_log::maybe_compact(const std::map<std::string, std::string, std::less<>>& live) {
    if (size_ < compact_bytes_) return;
    std::uint64_t need = 0;
    for (auto& [k, v] : live)
        need += head_size + 5 + k.size() + v.size();
    live_bytes_ = need;
    if (size_ < 2 * need) return;
    const std::string tmp = path_ + ".compact";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("open", tmp);
    try {
        std::string chunk;
        for (auto& [k, v] : live) {
            chunk += record(op_put, k, v);
            if (chunk.size() >= (1 << 20)) {
                write_all(fd, chunk, tmp);
                chunk.clear();
            }
        }
        write_all(fd, chunk, tmp);
        if (::fdatasync(fd) != 0) fail("fdatasync", tmp);
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    if (::rename(tmp.c_str(), path_.c_str()) != 0) {
        ::close(fd);
        fail("rename", tmp);
    }
    ::close(fd_);
    fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
    if (fd_ < 0) fail("reopen", path_);
    ::close(fd);
    // The directory entry must be durable too before the old log is gone.
    std::string dir = path_.substr(0, path_.find_last_of('/') + 1);
    int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)::fsync(dfd);
        ::close(dfd);
    }
    spdlog::info("kv log {}: compacted {} -> {} bytes", path_, size_, need);
    size_ = need;
}

}  // namespace smarm::services
