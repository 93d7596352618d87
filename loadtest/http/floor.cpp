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
// With --ws it is the floor of the WebSocket echo benchmark instead
// (loadtest/websocket/compare_ws.py): the first head on a connection is
// answered 101 (its Sec-WebSocket-Accept computed), then every complete
// client frame is unmasked and sent back as one server frame with the same
// first byte (a close is answered with a close and the connection ends).
// No UTF-8 check, limits or fragmentation rules: only the work any
// event-driven echo server must do per message.
//
// Usage: smarm-http-floor PORT [--ws]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/websocket/detail/hybi13.hpp>

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
    std::string in;   // bytes of an incomplete request head (or frame)
    std::string out;  // answers the socket did not take yet
    bool close_after = false;
    bool upgraded = false;  // --ws: the 101 went out; `in` holds frames
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

// --ws: the 101 for the head ending at `end` (its Sec-WebSocket-Key's
// accept); false when the head has no key.
bool upgrade(conn& c, std::size_t end) {
    const std::string_view head(c.in.data(), end);
    constexpr std::string_view name = "Sec-WebSocket-Key:";
    auto at = head.find(name);
    if (at == std::string_view::npos) return false;
    at += name.size();
    while (at < head.size() && head[at] == ' ')
        ++at;
    const auto stop = head.find("\r\n", at);
    const std::string_view key = head.substr(at, stop == std::string_view::npos ? stop : stop - at);
    boost::beast::static_string<28> accept;
    boost::beast::websocket::detail::make_sec_ws_accept(accept, key);
    c.out.append("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Accept: ");
    c.out.append(accept.data(), accept.size());
    c.out.append("\r\n\r\n");
    c.in.erase(0, end + 4);
    c.upgraded = true;
    return true;
}

// --ws: echoes every complete client frame in c.in; false on a frame no
// client sends (unmasked).
bool echo(conn& c) {
    std::size_t at = 0;
    const auto* in = reinterpret_cast<const unsigned char*>(c.in.data());
    while (c.in.size() - at >= 2) {
        const unsigned char b0 = in[at], b1 = in[at + 1];
        if ((b1 & 0x80) == 0) return false;
        std::size_t head = 2;
        std::uint64_t len = b1 & 0x7f;
        if (len == 126) {
            head = 4;
        } else if (len == 127) {
            head = 10;
        }
        if (c.in.size() - at < head + 4) break;
        if (head > 2) {
            len = 0;
            for (std::size_t i = 2; i < head; ++i)
                len = (len << 8) | in[at + i];
        }
        if (c.in.size() - at < head + 4 + len) break;
        const unsigned char* mask = in + at + head;
        const unsigned char* payload = mask + 4;
        const unsigned opcode = b0 & 0x0f;
        c.out.push_back(static_cast<char>(opcode == 0x9 ? (b0 & 0xf0) | 0xa : b0));
        if (len < 126) {
            c.out.push_back(static_cast<char>(len));
        } else if (len < 65536) {
            c.out.push_back(static_cast<char>(126));
            c.out.push_back(static_cast<char>(len >> 8));
            c.out.push_back(static_cast<char>(len & 0xff));
        } else {
            c.out.push_back(static_cast<char>(127));
            for (int i = 7; i >= 0; --i)
                c.out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
        }
        const std::size_t from = c.out.size();
        c.out.append(reinterpret_cast<const char*>(payload), len);
        for (std::size_t i = 0; i < len; ++i)
            c.out[from + i] = static_cast<char>(c.out[from + i] ^ mask[i & 3]);
        at += head + 4 + len;
        if (opcode == 0x8) {
            c.close_after = true;
            break;
        }
    }
    c.in.erase(0, at);
    return true;
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
    const bool ws = argc == 3 && std::string_view(argv[2]) == "--ws";
    if (argc != 2 && !ws) {
        std::fprintf(stderr, "usage: %s PORT [--ws]\n", argv[0]);
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
            if (!ws) {
                if (!c.close_after) answer(c);
            } else if (!c.close_after) {
                if (!c.upgraded) {
                    const auto end = c.in.find("\r\n\r\n");
                    if (end != std::string::npos && !upgrade(c, end)) alive = false;
                }
                if (alive && c.upgraded && !echo(c)) alive = false;
            }
            if (!alive) {
                drop(fd);
                continue;
            }
            if (!flush(fd, c)) {
                drop(fd);
                continue;
            }
            if (c.close_after && c.out.empty()) drop(fd);
        }
    }
}
