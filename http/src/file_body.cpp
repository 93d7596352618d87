// File bodies: opening, reading and closing the file a response names
// (each call runs on the blocking pool).

#include "file_body.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace smarm::http::internal {

file_open_result open_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return {-1,
                e == ENOENT || e == ENOTDIR ? http::status::not_found
                : e == EACCES               ? http::status::forbidden
                                            : http::status::internal_server_error,
                0};
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        return {-1, http::status::not_found, 0};
    }
    return {fd, http::status::ok, static_cast<std::uint64_t>(st.st_size)};
}

long read_file(int fd, char* p, std::size_t n, std::uint64_t off) {
    for (;;) {
        ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
        if (r < 0 && errno == EINTR) continue;
        return static_cast<long>(r);
    }
}

void close_file(int fd) noexcept {
    if (fd >= 0) ::close(fd);
}

}  // namespace smarm::http::internal
