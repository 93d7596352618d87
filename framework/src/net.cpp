// TCP sockets over the io_driver: non-blocking syscall first, park on EAGAIN.

#include <smarm/net.hpp>

#include <smarm/runtime.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "io_driver.hpp"

namespace smarm {

namespace {

using steady = std::chrono::steady_clock;

[[noreturn]] void fail(int e, const std::string& what) {
    throw std::system_error(e, std::generic_category(), what);
}

std::optional<steady::time_point> deadline_of(io_deadline t) {
    if (!t) return std::nullopt;
    return detail::clock::now() + *t;
}

std::string endpoint(const std::string& host, std::uint16_t port) {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
           std::to_string(port);
}

std::vector<socket_address> resolve(const std::string& host, std::uint16_t port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    const std::string service = std::to_string(port);
    auto lookup = [&](int extra) {
        addrinfo h = hints;
        h.ai_flags |= extra;
        addrinfo* res = nullptr;
        int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &h, &res);
        std::vector<socket_address> out;
        if (rc == 0) {
            for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
                socket_address sa;
                std::memcpy(&sa.storage, a->ai_addr, a->ai_addrlen);
                sa.length = a->ai_addrlen;
                out.push_back(sa);
            }
            freeaddrinfo(res);
        }
        return std::make_pair(rc, out);
    };
    // Numeric addresses resolve at once; names go to the blocking pool (DNS).
    auto [rc, out] = lookup(AI_NUMERICHOST);
    if (rc == EAI_NONAME) std::tie(rc, out) = block_on_io([&] { return lookup(0); });
    if (rc != 0 || out.empty())
        throw std::system_error(
            std::make_error_code(std::errc::address_not_available),
            "smarm: cannot resolve " + endpoint(host, port) + ": " + gai_strerror(rc));
    return out;
}

// Deregisters, then closes: shared by both socket kinds.
void close_socket(int& fd, detail::io_driver* d, detail::poll_desc*& pd) noexcept {
    if (fd < 0) return;
    if (pd != nullptr) d->close(pd, true);
    pd = nullptr;
    ::close(fd);
    fd = -1;
}

socket_address address_of(int fd, bool peer) {
    socket_address a;
    a.length = sizeof a.storage;
    auto* sa = reinterpret_cast<sockaddr*>(&a.storage);
    if ((peer ? getpeername(fd, sa, &a.length) : getsockname(fd, sa, &a.length)) != 0) a.length = 0;
    return a;
}

int make_socket(int family) {
    int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) fail(errno, "smarm: socket()");
    return fd;
}

}  // namespace

std::string socket_address::to_string() const {
    char buf[INET6_ADDRSTRLEN] = {};
    if (storage.ss_family == AF_INET) {
        auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
        inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
        return std::string(buf) + ":" + std::to_string(ntohs(a->sin_port));
    }
    if (storage.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
        inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
        return "[" + std::string(buf) + "]:" + std::to_string(ntohs(a->sin6_port));
    }
    return "<unknown address family>";
}

std::uint16_t socket_address::port() const noexcept {
    if (storage.ss_family == AF_INET)
        return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
    if (storage.ss_family == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
    return 0;
}

// ---------------------------------------------------------------------------
// tcp_stream
// ---------------------------------------------------------------------------

tcp_stream::tcp_stream(int fd, detail::io_driver& d) : fd_(fd), d_(&d) {
    try {
        pd_ = d.open(fd, d.persistent_sockets());
    } catch (...) {
        ::close(fd);
        fd_ = -1;
        throw;
    }
    read_src_.emplace(d, pd_, io_dir::read);
    write_src_.emplace(d, pd_, io_dir::write);
}

tcp_stream::tcp_stream(tcp_stream&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      d_(o.d_),
      pd_(std::exchange(o.pd_, nullptr)),
      read_src_(std::move(o.read_src_)),
      write_src_(std::move(o.write_src_)),
      read_drained_(o.read_drained_),
      peer_(o.peer_) {}

tcp_stream& tcp_stream::operator=(tcp_stream&& o) noexcept {
    if (this != &o) {
        close();
        fd_ = std::exchange(o.fd_, -1);
        d_ = o.d_;
        pd_ = std::exchange(o.pd_, nullptr);
        read_src_ = std::move(o.read_src_);
        write_src_ = std::move(o.write_src_);
        read_drained_ = o.read_drained_;
        peer_ = o.peer_;
    }
    return *this;
}

tcp_stream::~tcp_stream() {
    close();
}

void tcp_stream::close() noexcept {
    close_socket(fd_, d_, pd_);
}

bool tcp_stream::wait(io_dir dir, std::optional<std::chrono::steady_clock::time_point> deadline) {
    return d_->wait(pd_, static_cast<int>(dir), deadline);
}

tcp_stream tcp_stream::connect(const std::string& host, std::uint16_t port,
                               std::chrono::nanoseconds timeout) {
    auto& d = detail::current_io("smarm::tcp_stream::connect");
    const auto deadline = detail::clock::now() + timeout;
    int last_error = 0;
    std::string last_addr = endpoint(host, port);
    for (const socket_address& addr : resolve(host, port, false)) {
        last_addr = addr.to_string();
        int fd = make_socket(addr.storage.ss_family);
        // connect() before registering: an unconnected socket reports
        // EPOLLHUP, which would leave a stale read readiness behind.
        bool in_progress = false;
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) != 0) {
            if (errno != EINPROGRESS) {
                last_error = errno;
                ::close(fd);
                continue;
            }
            in_progress = true;
        }
        tcp_stream s(fd, d);
        if (in_progress) {
            if (!s.wait(io_dir::write, deadline))
                throw io_timeout("smarm::tcp_stream::connect: " + last_addr + " timed out");
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(s.fd_, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err != 0) {
                last_error = err;
                continue;
            }
        }
        s.set_nodelay(true);
        return s;
    }
    fail(last_error ? last_error : ECONNREFUSED, "smarm::tcp_stream::connect: " + last_addr);
}

std::size_t tcp_stream::read_some(void* buf, std::size_t n, io_deadline timeout) {
    return read_some_until(buf, n, deadline_of(timeout));
}

std::size_t tcp_stream::read_some_until(void* buf, std::size_t n,
                                        std::optional<steady::time_point> deadline,
                                        std::error_code& ec) {
    ec.clear();
    if (fd_ < 0) {
        ec.assign(EBADF, std::generic_category());
        return 0;
    }
    // The last read came back short: the socket was drained then, so wait
    // for the next edge instead of spending a recv on EAGAIN (nginx does the
    // same via EPOLLRDHUP). An edge that arrived meanwhile makes it instant.
    if (std::exchange(read_drained_, false) && n != 0 && !wait(io_dir::read, deadline)) {
        ec = std::make_error_code(std::errc::timed_out);
        return 0;
    }
    for (;;) {
        ssize_t r = ::recv(fd_, buf, n, 0);
        if (r >= 0) {
            read_drained_ = r > 0 && static_cast<std::size_t>(r) < n;
            return static_cast<std::size_t>(r);
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            ec.assign(errno, std::generic_category());
            return 0;
        }
        if (!wait(io_dir::read, deadline)) {
            ec = std::make_error_code(std::errc::timed_out);
            return 0;
        }
    }
}

std::size_t tcp_stream::read_some_until(void* buf, std::size_t n,
                                        std::optional<steady::time_point> deadline) {
    std::error_code ec;
    std::size_t r = read_some_until(buf, n, deadline, ec);
    if (ec) raise(ec, "smarm::tcp_stream::read_some", "from");
    return r;
}

std::size_t tcp_stream::write_some(const void* buf, std::size_t n, io_deadline timeout) {
    return write_some_until(buf, n, deadline_of(timeout));
}

std::size_t tcp_stream::write_some_until(const void* buf, std::size_t n,
                                         std::optional<steady::time_point> deadline,
                                         std::error_code& ec) {
    ec.clear();
    if (fd_ < 0) {
        ec.assign(EBADF, std::generic_category());
        return 0;
    }
    for (;;) {
        ssize_t r = ::send(fd_, buf, n, MSG_NOSIGNAL);
        if (r >= 0) return static_cast<std::size_t>(r);
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            ec.assign(errno, std::generic_category());
            return 0;
        }
        if (!wait(io_dir::write, deadline)) {
            ec = std::make_error_code(std::errc::timed_out);
            return 0;
        }
    }
}

std::size_t tcp_stream::write_some_until(const void* buf, std::size_t n,
                                         std::optional<steady::time_point> deadline) {
    std::error_code ec;
    std::size_t r = write_some_until(buf, n, deadline, ec);
    if (ec) raise(ec, "smarm::tcp_stream::write_some", "to");
    return r;
}

[[noreturn]] void tcp_stream::raise(const std::error_code& ec, const char* op,
                                    const char* dir) const {
    if (ec == std::errc::timed_out) throw io_timeout(std::string(op) + ": timed out");
    if (fd_ < 0) fail(ec.value(), std::string(op) + ": closed stream");
    fail(ec.value(), std::string(op) + " " + dir + " " + peer_address().to_string());
}

void tcp_stream::read_exact(void* buf, std::size_t n, io_deadline timeout) {
    const auto deadline = deadline_of(timeout);
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
        std::size_t got = read_some_until(p, n, deadline);
        if (got == 0)
            fail(ECONNRESET, "smarm::tcp_stream::read_exact: " + peer_address().to_string() +
                                 " closed the connection with " + std::to_string(n) +
                                 " bytes still expected");
        p += got;
        n -= got;
    }
}

void tcp_stream::write_all(const void* buf, std::size_t n, io_deadline timeout) {
    write_all_until(buf, n, deadline_of(timeout));
}

void tcp_stream::write_all_until(const void* buf, std::size_t n,
                                 std::optional<steady::time_point> deadline) {
    auto* p = static_cast<const char*>(buf);
    while (n > 0) {
        std::size_t put = write_some_until(p, n, deadline);
        p += put;
        n -= put;
    }
}

void tcp_stream::shutdown(int how) {
    if (::shutdown(fd_, how) != 0) fail(errno, "smarm::tcp_stream::shutdown");
}

void tcp_stream::set_nodelay(bool on) {
    int v = on ? 1 : 0;
    if (setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) != 0)
        fail(errno, "smarm::tcp_stream::set_nodelay");
}

socket_address tcp_stream::peer_address() const {
    if (peer_.length != 0) return peer_;
    return address_of(fd_, true);
}

socket_address tcp_stream::local_address() const {
    return address_of(fd_, false);
}

// ---------------------------------------------------------------------------
// tcp_listener
// ---------------------------------------------------------------------------

tcp_listener::tcp_listener(tcp_listener&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      d_(o.d_),
      pd_(std::exchange(o.pd_, nullptr)),
      src_(std::move(o.src_)),
      nodelay_(o.nodelay_) {}

tcp_listener& tcp_listener::operator=(tcp_listener&& o) noexcept {
    if (this != &o) {
        close();
        fd_ = std::exchange(o.fd_, -1);
        d_ = o.d_;
        pd_ = std::exchange(o.pd_, nullptr);
        src_ = std::move(o.src_);
        nodelay_ = o.nodelay_;
    }
    return *this;
}

tcp_listener::~tcp_listener() {
    close();
}

void tcp_listener::close() noexcept {
    close_socket(fd_, d_, pd_);
}

tcp_listener tcp_listener::bind(const std::string& host, std::uint16_t port,
                                listen_options options) {
    auto& d = detail::current_io("smarm::tcp_listener::bind");
    int last_error = 0;
    std::string last_addr = endpoint(host, port);
    for (const socket_address& addr : resolve(host, port, true)) {
        last_addr = addr.to_string();
        int fd = make_socket(addr.storage.ss_family);
        int one = 1;
        if (options.reuse_address) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (options.reuse_port) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        // Accepted sockets inherit it on Linux, which saves a setsockopt
        // per connection (accept checks that it did).
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) != 0 ||
            ::listen(fd, options.backlog) != 0) {
            last_error = errno;
            ::close(fd);
            continue;
        }
        tcp_listener l;
        l.fd_ = fd;
        l.d_ = &d;
        try {
            l.pd_ = d.open(fd, d.persistent_sockets());
        } catch (...) {
            l.pd_ = nullptr;
            throw;
        }
        l.src_.emplace(d, l.pd_, io_dir::read);
        return l;
    }
    fail(last_error ? last_error : EADDRNOTAVAIL, "smarm::tcp_listener::bind: " + last_addr);
}

tcp_stream tcp_listener::accept(io_deadline timeout) {
    if (fd_ < 0) fail(EBADF, "smarm::tcp_listener::accept: closed listener");
    const auto deadline = deadline_of(timeout);
    for (;;) {
        socket_address peer;
        peer.length = sizeof peer.storage;
        int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer.storage), &peer.length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            tcp_stream s(fd, *d_);
            // The peer comes with the accept: no getpeername per connection.
            if (peer.length <= sizeof peer.storage) s.peer_ = peer;
            if (nodelay_ == nodelay::unknown) {
                int v = 0;
                socklen_t n = sizeof v;
                nodelay_ = getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &n) == 0 && v != 0
                               ? nodelay::inherited
                               : nodelay::per_socket;
            }
            if (nodelay_ == nodelay::per_socket) s.set_nodelay(true);
            return s;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            fail(errno, "smarm::tcp_listener::accept on " + local_address().to_string());
        if (!d_->wait(pd_, 0, deadline)) throw io_timeout("smarm::tcp_listener::accept: timed out");
    }
}

socket_address tcp_listener::local_address() const {
    return address_of(fd_, false);
}

fd_limit raise_fd_limit() noexcept {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return {};
    if (r.rlim_cur < r.rlim_max) {
        rlimit want = r;
        want.rlim_cur = r.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &want) == 0) r = want;
    }
    const auto value = [](rlim_t v) {
        return v == RLIM_INFINITY ? UINT64_MAX : static_cast<std::uint64_t>(v);
    };
    return {value(r.rlim_cur), value(r.rlim_max)};
}

}  // namespace smarm
