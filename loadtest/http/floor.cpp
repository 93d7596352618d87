// smarm-http-floor: the kernel floor of the plaintext benchmark.
//
// One thread, one edge-triggered epoll set, no HTTP parser: every request
// head (up to "\r\n\r\n") is answered with smarm-hello's exact response
// bytes (a fixed Date), and a head that contains "Connection: close" closes
// the connection after its answer. It does only the syscalls any
// event-driven server must make (accept4, recv, send, epoll_wait; epoll_ctl
// ADD and close per connection), so its rate under a load is the most any
// one-threaded server can reach on the same machine and kernel: it
// calibrates the benchmark targets (loadtest/http/compare_http.py), it is
// not an HTTP server. Requests with bodies are not supported.
//
// Usage: smarm-http-floor PORT
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>

namespace {

constexpr std::string_view response =
    "HTTP/1.1 200 OK\r\n"
    "Server: smarm\r\n"
    "Date: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 13\r\n"
    "\r\n"
    "Hello, World!";
// The answer to a request that asked to close: a client that is not told
// takes the close for a broken keep-alive connection (wrk counts an error).
constexpr std::string_view response_close =
    "HTTP/1.1 200 OK\r\n"
    "Server: smarm\r\n"
    "Date: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 13\r\n"
    "Connection: close\r\n"
    "\r\n"
    "Hello, World!";

struct conn {
    std::string in;   // bytes of an incomplete request head
    std::string out;  // answers the socket did not take yet
    bool close_after = false;
};

[[noreturn]] void die(const char* what) {
    std::perror(what);
    std::exit(1);
}

// Answers every complete head in c.in, up to one that asks to close
// (c.close_after: close once c.out is flushed).
void answer(conn& c) {
    std::size_t start = 0;
    for (;;) {
        const std::size_t end = c.in.find("\r\n\r\n", start);
        if (end == std::string::npos) break;
        const std::string_view head(c.in.data() + start, end - start);
        start = end + 4;
        if (head.find("Connection: close") != std::string_view::npos ||
            head.find("connection: close") != std::string_view::npos) {
            c.out.append(response_close);
            c.close_after = true;
            break;
        }
        c.out.append(response);
    }
    c.in.erase(0, start);
}

// Sends what is pending; false on a fatal error.
bool flush(int fd, conn& c) {
    while (!c.out.empty()) {
        const ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n < 0) return errno == EAGAIN || errno == EINTR;
        c.out.erase(0, static_cast<std::size_t>(n));
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    const int port = std::atoi(argv[1]);
    if (port <= 0 || port > 65535) {
        std::fprintf(stderr, "smarm-http-floor: bad port '%s'\n", argv[1]);
        return 2;
    }
    const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    const int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("bind");
    if (::listen(lfd, 4096) != 0) die("listen");
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    epoll_event lev{};
    lev.events = EPOLLIN;
    lev.data.fd = lfd;
    if (::epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) != 0) die("epoll_ctl");

    std::unordered_map<int, conn> conns;
    auto drop = [&](int fd) {
        conns.erase(fd);
        ::close(fd);
    };
    epoll_event evs[256];
    char buf[16384];
    for (;;) {
        const int n = ::epoll_wait(ep, evs, 256, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; ++i) {
            const int fd = evs[i].data.fd;
            if (fd == lfd) {
                for (;;) {
                    const int cfd = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (cfd < 0) break;
                    epoll_event cev{};
                    cev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
                    cev.data.fd = cfd;
                    if (::epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &cev) != 0) {
                        ::close(cfd);
                        continue;
                    }
                    conns.emplace(cfd, conn{});
                }
                continue;
            }
            auto it = conns.find(fd);
            if (it == conns.end()) continue;
            conn& c = it->second;
            bool alive = true;
            if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                for (;;) {
                    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
                    if (r > 0) {
                        c.in.append(buf, static_cast<std::size_t>(r));
                        if (static_cast<std::size_t>(r) < sizeof buf) break;
                        continue;
                    }
                    if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
                    alive = false;  // EOF or error
                    break;
                }
            }
            if (!alive) {
                drop(fd);
                continue;
            }
            if (!c.close_after) answer(c);
            if (!flush(fd, c)) {
                drop(fd);
                continue;
            }
            if (c.close_after && c.out.empty()) drop(fd);
        }
    }
}
