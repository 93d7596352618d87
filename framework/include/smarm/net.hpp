#pragma once
// smarm TCP sockets for actors: tcp_listener and tcp_stream.
//
//     auto listener = smarm::tcp_listener::bind("127.0.0.1", 8080);
//     for (;;) {
//         auto conn = listener.accept();
//         smarm::spawn([c = std::move(conn)]() mutable {
//             char buf[4096];
//             while (std::size_t n = c.read_some(buf, sizeof buf)) c.write_all(buf, n);
//         }).detach();
//     }
//
// Every operation tries the non-blocking syscall first and parks the actor
// only on EAGAIN, until the runtime's epoll thread reports readiness. A
// socket registers with epoll once (runtime_config::sockets = persistent,
// the default) or per wait (oneshot). Timeouts are per call: a read, write
// or accept that times out throws smarm::io_timeout; other failures throw
// std::system_error whose message names the operation and the address.
// read_some_until / write_some_until also come in a std::error_code form
// that throws only smarm::stopped (the actor must unwind): a timeout is
// std::errc::timed_out there, for loops that treat failure as data (the
// HTTP connection) rather than as an exception per closed peer.
//
// Thread safety: a socket is used by one actor at a time per direction (one
// reader and one writer may work concurrently). Sockets belong to the run
// that made them: close them before smarm::run returns. Move-only.

#include <smarm/io.hpp>

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>

namespace smarm {

/// An IPv4 or IPv6 socket address.
struct socket_address {
    sockaddr_storage storage{};
    socklen_t length = 0;

    /// "127.0.0.1:8080" or "[::1]:8080".
    std::string to_string() const;
    std::uint16_t port() const noexcept;
};

using io_deadline = std::optional<std::chrono::nanoseconds>;

/// A connected TCP socket.
class tcp_stream {
  public:
    tcp_stream() = default;
    tcp_stream(tcp_stream&& o) noexcept;
    tcp_stream& operator=(tcp_stream&& o) noexcept;
    ~tcp_stream();

    /// Connects to host:port (numeric, or a name resolved on the blocking
    /// pool), trying each resolved address in turn. Throws io_timeout, or
    /// std::system_error naming the address (refused, unreachable, ...).
    static tcp_stream connect(const std::string& host, std::uint16_t port,
                              std::chrono::nanoseconds timeout = std::chrono::seconds(30));

    /// Reads at most `n` bytes; 0 means the peer closed its side.
    std::size_t read_some(void* buf, std::size_t n, io_deadline timeout = std::nullopt);
    /// Writes at most `n` bytes (at least 1 unless n == 0).
    std::size_t write_some(const void* buf, std::size_t n, io_deadline timeout = std::nullopt);
    /// read_some / write_some with an absolute deadline (nullopt: none),
    /// for callers that keep one across calls: no clock read to turn a
    /// timeout into a deadline. A deadline already past times out only if
    /// the call would have to wait.
    std::size_t read_some_until(void* buf, std::size_t n,
                                std::optional<std::chrono::steady_clock::time_point> deadline);
    std::size_t write_some_until(const void* buf, std::size_t n,
                                 std::optional<std::chrono::steady_clock::time_point> deadline);
    /// The same, reporting failure in `ec` (errno values in the generic
    /// category; std::errc::timed_out past the deadline) instead of
    /// throwing; returns 0 then. Throws only smarm::stopped.
    std::size_t read_some_until(void* buf, std::size_t n,
                                std::optional<std::chrono::steady_clock::time_point> deadline,
                                std::error_code& ec);
    std::size_t write_some_until(const void* buf, std::size_t n,
                                 std::optional<std::chrono::steady_clock::time_point> deadline,
                                 std::error_code& ec);
    /// Reads exactly `n` bytes; an early end of stream is a std::system_error.
    /// The timeout applies to the whole call.
    void read_exact(void* buf, std::size_t n, io_deadline timeout = std::nullopt);
    /// Writes all `n` bytes; the timeout applies to the whole call.
    void write_all(const void* buf, std::size_t n, io_deadline timeout = std::nullopt);
    /// write_all by an absolute deadline (nullopt: none): no clock read,
    /// for a caller that already has the deadline (write_some_until's rule
    /// for a deadline already past).
    void write_all_until(const void* buf, std::size_t n,
                         std::optional<std::chrono::steady_clock::time_point> deadline);

    /// shutdown(2): SHUT_RD, SHUT_WR or SHUT_RDWR.
    void shutdown(int how = SHUT_WR);
    void set_nodelay(bool on);
    socket_address peer_address() const;
    socket_address local_address() const;
    /// Deregisters and closes; idempotent.
    void close() noexcept;
    bool is_open() const noexcept { return fd_ >= 0; }
    int native_handle() const noexcept { return fd_; }

    /// select() arms: ready when a read / write would not block (or failed).
    detail::fd_source& readable() noexcept { return *read_src_; }
    detail::fd_source& writable() noexcept { return *write_src_; }

  private:
    friend class tcp_listener;
    tcp_stream(int fd, internal::io_driver& d);
    bool wait(io_dir dir, std::optional<std::chrono::steady_clock::time_point> deadline);
    /// Throws what the error-code form reported: io_timeout, or a
    /// std::system_error naming the operation and the peer.
    [[noreturn]] void raise(const std::error_code& ec, const char* op, const char* dir) const;

    int fd_ = -1;
    internal::io_driver* d_ = nullptr;
    internal::poll_desc* pd_ = nullptr;
    std::optional<detail::fd_source> read_src_, write_src_;
    bool read_drained_ = false;  ///< the last read was short: wait before the next recv
    socket_address peer_;        ///< from accept (length 0: ask the kernel)
};

/// Options for tcp_listener::bind.
struct listen_options {
    int backlog = 1024;
    bool reuse_address = true;  ///< SO_REUSEADDR
    bool reuse_port = false;    ///< SO_REUSEPORT (several listeners, one port)
};

/// A listening TCP socket.
class tcp_listener {
  public:
    tcp_listener() = default;
    tcp_listener(tcp_listener&& o) noexcept;
    tcp_listener& operator=(tcp_listener&& o) noexcept;
    ~tcp_listener();

    /// Binds and listens on host:port ("0.0.0.0", "::", "127.0.0.1", ...;
    /// port 0 picks a free one). Throws std::system_error naming the address.
    static tcp_listener bind(const std::string& host, std::uint16_t port,
                             listen_options options = {});

    /// Accepts one connection (TCP_NODELAY set). Throws io_timeout.
    tcp_stream accept(io_deadline timeout = std::nullopt);
    socket_address local_address() const;
    void close() noexcept;
    int native_handle() const noexcept { return fd_; }
    detail::fd_source& acceptable() noexcept { return *src_; }

  private:
    int fd_ = -1;
    internal::io_driver* d_ = nullptr;
    internal::poll_desc* pd_ = nullptr;
    std::optional<detail::fd_source> src_;
    /// Whether accepted sockets come with TCP_NODELAY from the listener
    /// (Linux copies it; checked once, at the first accept).
    enum class nodelay : std::uint8_t {
        unknown,
        inherited,
        per_socket
    } nodelay_ = nodelay::unknown;
};

/// The process's open-file limit (RLIMIT_NOFILE).
struct fd_limit {
    std::uint64_t soft = 0;  ///< what open/accept are held to
    std::uint64_t hard = 0;  ///< the most the soft limit may be raised to
};

/// Raises the soft RLIMIT_NOFILE to the hard limit (as Go has done at start
/// since 1.19) and returns the limit in force afterwards. A stock shell
/// hands a process 1,024, far below what a server holding thousands of
/// connections needs. A process that spawns children which use select()
/// should lower it for them again. Leaves the limit as it was if the
/// kernel refuses.
fd_limit raise_fd_limit() noexcept;

}  // namespace smarm
