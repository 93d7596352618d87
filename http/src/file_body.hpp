#pragma once
// File bodies (file_body.cpp): the file access behind response::file, run
// on the blocking pool by the connection loop.

#include <smarm/http/message.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace smarm::http::internal {

/// The fd, or -1 and the status to answer (404 missing or not a regular
/// file, 403 unreadable, 500 otherwise), and the size.
struct file_open_result {
    int fd;
    http::status err;
    std::uint64_t size;
};
file_open_result open_file(const std::string& path);
/// pread that retries EINTR: bytes read, 0 at the end, -1 on error.
long read_file(int fd, char* p, std::size_t n, std::uint64_t off);
void close_file(int fd) noexcept;

}  // namespace smarm::http::internal
