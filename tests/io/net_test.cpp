#include <smarm/channel.hpp>
#include <smarm/net.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
using steady = smarm_test::steady;

namespace {

// An echo server: one actor per connection, stopped when `stop` closes.
smarm::join_handle start_echo(smarm::tcp_listener& l, std::atomic<int>& served) {
    return smarm::spawn([&] {
        std::vector<smarm::join_handle> conns;
        for (;;) {
            smarm::tcp_stream c;
            try {
                c = l.accept(200ms);
            } catch (const smarm::io_timeout&) {
                continue;
            }
            conns.push_back(smarm::spawn([&served, c = std::move(c)]() mutable {
                char buf[4096];
                while (std::size_t n = c.read_some(buf, sizeof buf))
                    c.write_all(buf, n);
                served.fetch_add(1);
            }));
        }
    });
}

void run_echo_clients(smarm::runtime_config cfg, int clients, int round_trips) {
    std::atomic<int> served{0}, ok{0};
    smarm::runtime rt(cfg);
    rt.run([&] {
        auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
        const auto port = l.local_address().port();
        auto server = start_echo(l, served);
        std::vector<smarm::join_handle> hs;
        for (int i = 0; i < clients; ++i)
            hs.push_back(smarm::spawn([&, i] {
                auto s = smarm::tcp_stream::connect("127.0.0.1", port, 10s);
                bool all = true;
                for (int k = 0; k < round_trips; ++k) {
                    std::string msg = std::to_string(i) + ":" + std::to_string(k) + ";";
                    s.write_all(msg.data(), msg.size(), 10s);
                    std::string back(msg.size(), '\0');
                    s.read_exact(back.data(), back.size(), 10s);
                    all = all && back == msg;
                }
                if (all) ok.fetch_add(1);
            }));
        for (auto& h : hs)
            h.join();
        smarm::request_stop(server.id());
        server.join();
    });
    EXPECT_EQ(ok.load(), clients);
}

TEST(Net, EchoThousandClientsHundredRoundTripsEach) {
    smarm::runtime_config c = smarm_test::config(2);
    run_echo_clients(c, 1000, 100);
}

TEST(Net, EchoWithOneshotRegistration) {
    smarm::runtime_config c = smarm_test::config(2);
    c.sockets = smarm::socket_registration::oneshot;
    run_echo_clients(c, 100, 50);
}

// accept() hands over the peer's address (taken from accept4, no
// getpeername) and a socket with TCP_NODELAY (inherited from the listener or
// set per socket); fd numbers freed by close (no EPOLL_CTL_DEL) are reused
// by later connections without stale readiness.
SMARM_TEST(Net, AcceptedStreamKnowsItsPeerAndHasNodelay) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    for (int round = 0; round < 50; ++round) {
        auto c = smarm::tcp_stream::connect("127.0.0.1", l.local_address().port(), 5s);
        auto s = l.accept(5s);
        EXPECT_EQ(s.peer_address().to_string(), c.local_address().to_string());
        int v = 0;
        socklen_t n = sizeof v;
        ASSERT_EQ(getsockopt(s.native_handle(), IPPROTO_TCP, TCP_NODELAY, &v, &n), 0);
        EXPECT_NE(v, 0) << "round " << round;
        c.write_all("x", 1);
        char b = 0;
        s.read_exact(&b, 1, 5s);
        EXPECT_EQ(b, 'x');
        s.close();
        EXPECT_EQ(c.read_some(&b, 1, 5s), 0u) << "the peer sees the close";
    }
}

SMARM_TEST(Net, Ipv6Loopback) {
    std::atomic<int> served{0};
    smarm::tcp_listener l;
    try {
        l = smarm::tcp_listener::bind("::1", 0);
    } catch (const std::system_error&) {
        GTEST_SKIP() << "no IPv6 loopback on this machine";
    }
    auto server = start_echo(l, served);
    auto s = smarm::tcp_stream::connect("::1", l.local_address().port(), 5s);
    EXPECT_NE(s.peer_address().to_string().find("[::1]"), std::string::npos);
    s.write_all("ping", 4);
    char buf[4];
    s.read_exact(buf, 4, 5s);
    EXPECT_EQ(std::string(buf, 4), "ping");
    s.close();
    smarm::request_stop(server.id());
    server.join();
}

// Data, then the peer's FIN: a short read drains the data and the next read
// must see end-of-stream. Edge-triggered epoll reports the FIN once, maybe
// in the same edge as the data or while the reader is being woken for the
// data; the poll descriptor keeps it (hup) so the drained reader does not
// wait for an edge that already came. (Found live: the HTTP server's 408
// test hung on the client's read after the 408.) This ordering does not
// force the race; HttpServer.SlowHeadersGet408AndIdleConnectionsClose hit it.
// The fds in this process's epoll sets (the tfd lines of every eventpoll
// fd's /proc/self/fdinfo).
std::set<int> epoll_registered_fds() {
    std::set<int> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code ec;
        auto target = std::filesystem::read_symlink(e.path(), ec);
        if (ec || target.string() != "anon_inode:[eventpoll]") continue;
        std::ifstream in("/proc/self/fdinfo/" + e.path().filename().string());
        for (std::string line; std::getline(in, line);)
            if (line.rfind("tfd:", 0) == 0) out.insert(std::stoi(line.substr(4)));
    }
    return out;
}

// A socket is added to epoll on its first wait: one served by reads that
// find their data never costs an epoll_ctl. Data that lands between the
// EAGAIN and the registration is reported by the ADD itself.
SMARM_TEST_N(Net, ASocketEntersTheEpollSetOnItsFirstWait, 1) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    auto client = smarm::tcp_stream::connect("127.0.0.1", l.local_address().port());
    client.write_all("hello", 5);
    auto server = l.accept();
    // Until the bytes are there (a blocking poll: this test only).
    pollfd p{server.native_handle(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10'000), 1);
    char buf[16];
    EXPECT_EQ(server.read_some(buf, sizeof buf, 10s), 5u);
    server.write_all("hi", 2);
    EXPECT_FALSE(epoll_registered_fds().contains(server.native_handle()));

    auto reader = smarm::spawn([&] {
        char more[16];
        EXPECT_EQ(server.read_some(more, sizeof more, 10s), 3u);
    });
    smarm::yield_now();  // the reader runs, finds nothing and parks
    EXPECT_TRUE(epoll_registered_fds().contains(server.native_handle()));
    client.write_all("abc", 3);
    reader.join();
}

SMARM_TEST_N(Net, FinAfterTheLastDataIsSeen, 1) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    auto client = smarm::tcp_stream::connect("127.0.0.1", l.local_address().port());
    auto server = l.accept();
    auto reader = smarm::spawn([&] {
        char buf[256];
        EXPECT_EQ(client.read_some(buf, sizeof buf, 10s), 5u);  // short: drained
        EXPECT_EQ(client.read_some(buf, sizeof buf, 10s), 0u);  // the FIN
    });
    smarm::yield_now();  // the reader runs and parks in its read
    server.write_all("hello", 5);
    server.shutdown(SHUT_WR);
    reader.join();
}

SMARM_TEST(Net, ReadTimeoutFiresNeverEarly) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    auto s = smarm::tcp_stream::connect("127.0.0.1", l.local_address().port(), 5s);
    auto peer = l.accept(5s);
    char buf[8];
    auto t0 = steady::now();
    EXPECT_THROW(s.read_some(buf, sizeof buf, 30ms), smarm::io_timeout);
    EXPECT_GE(steady::now() - t0, 30ms);
    EXPECT_LT(steady::now() - t0, 5s);
    peer.write_all("x", 1);
    EXPECT_EQ(s.read_some(buf, sizeof buf, 5s), 1u) << "readable again after a timeout";
}

// The absolute-deadline forms: a deadline already past fails only a call
// that would have to wait; data already there is still returned.
SMARM_TEST(Net, UntilFormsTimeOutOnlyWhenTheyWouldWait) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    auto s = smarm::tcp_stream::connect("127.0.0.1", l.local_address().port(), 5s);
    auto peer = l.accept(5s);
    const auto past = steady::now() - 1s;
    char buf[8];
    EXPECT_THROW(s.read_some_until(buf, sizeof buf, past), smarm::io_timeout);
    EXPECT_EQ(s.write_some_until("ab", 2, past), 2u);  // the send buffer has room
    s.write_all_until("cd", 2, past);
    std::size_t got = 0;
    while (got < 4)
        got += peer.read_some_until(buf + got, sizeof buf - got, steady::now() + 5s);
    EXPECT_EQ(std::string_view(buf, got), "abcd");
    peer.write_all("x", 1);
    // Until it has arrived (loopback: at once), then read it past the deadline.
    pollfd pfd{s.native_handle(), POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
    EXPECT_EQ(s.read_some_until(buf, sizeof buf, past), 1u);
    auto t0 = steady::now();
    EXPECT_THROW(s.read_some_until(buf, sizeof buf, t0 + 30ms), smarm::io_timeout);
    EXPECT_GE(steady::now() - t0, 30ms);
    peer.write_all("y", 1);
    EXPECT_EQ(s.read_some_until(buf, sizeof buf, std::nullopt), 1u);
}

SMARM_TEST(Net, ConnectTimeoutFiresNeverEarly) {
    // A listener with a full backlog never completes further handshakes
    // on Linux (the SYN is dropped), so connect must time out.
    smarm::listen_options o;
    o.backlog = 0;
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0, o);
    const auto port = l.local_address().port();
    std::vector<smarm::tcp_stream> filler;
    bool timed_out = false;
    for (int i = 0; i < 16 && !timed_out; ++i) {
        auto t0 = steady::now();
        try {
            filler.push_back(smarm::tcp_stream::connect("127.0.0.1", port, 100ms));
        } catch (const smarm::io_timeout&) {
            timed_out = true;
            EXPECT_GE(steady::now() - t0, 100ms);
            EXPECT_LT(steady::now() - t0, 10s);
        }
    }
    EXPECT_TRUE(timed_out) << "a saturated backlog never made connect time out";
}

SMARM_TEST(Net, ConnectionRefusedNamesTheAddress) {
    std::uint16_t port;
    {
        auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
        port = l.local_address().port();
    }  // closed: nobody listens there now
    try {
        (void)smarm::tcp_stream::connect("127.0.0.1", port, 5s);
        ADD_FAILURE() << "connect to a closed port succeeded";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code(), std::make_error_code(std::errc::connection_refused));
        EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)),
                  std::string::npos)
            << e.what();
    }
}

SMARM_TEST(Net, UnreachableSurfacesAsAnErrorNamingTheAddress) {
    // 2001:db8::/32 (RFC 3849, documentation) is never routed: depending
    // on the machine the connect fails at once (no route) or never
    // completes (timeout); either way the error names the address. (An
    // IPv4 TEST-NET address is no good here: this sandbox's network
    // accepts connections to any IPv4 address.)
    try {
        (void)smarm::tcp_stream::connect("2001:db8::1", 9, 300ms);
        GTEST_SKIP() << "this network accepted a connection to 2001:db8::1";
    } catch (const std::system_error& e) {
        EXPECT_NE(std::string(e.what()).find("[2001:db8::1]:9"), std::string::npos) << e.what();
    }
}

SMARM_TEST(Net, BindErrorNamesTheAddress) {
    try {
        (void)smarm::tcp_listener::bind("203.0.113.1", 1);  // not ours
        ADD_FAILURE() << "bind to a foreign address succeeded";
    } catch (const std::system_error& e) {
        EXPECT_NE(std::string(e.what()).find("203.0.113.1:1"), std::string::npos) << e.what();
    }
}

SMARM_TEST(Net, StoppedReaderLeavesTheSocketReadableByAnother) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    auto s = smarm::tcp_stream::connect("127.0.0.1", l.local_address().port(), 5s);
    auto peer = l.accept(5s);
    auto reader = smarm::spawn([&] {
        char b;
        (void)s.read_some(&b, 1);
    });
    smarm::sleep(3ms);
    smarm::request_stop(reader.id());
    EXPECT_EQ(reader.join().kind, smarm::exit_kind::stopped);
    auto other = smarm::spawn([&] {
        char b = 0;
        EXPECT_EQ(s.read_some(&b, 1, 5s), 1u);
        EXPECT_EQ(b, 'z');
    });
    smarm::sleep(2ms);
    peer.write_all("z", 1);
    EXPECT_EQ(other.join().kind, smarm::exit_kind::exit);
}

SMARM_TEST(Net, SelectOverSocketAndChannel) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    auto s = smarm::tcp_stream::connect("127.0.0.1", l.local_address().port(), 5s);
    auto peer = l.accept(5s);
    auto [tx, rx] = smarm::channel<int>();
    // timeout
    EXPECT_FALSE(smarm::select_timeout({rx, s.readable()}, 10ms).has_value());
    // channel wins
    (void)tx.send(1);
    EXPECT_EQ(smarm::select({rx, s.readable()}), 0u);
    (void)rx.try_recv();
    // fd wins
    auto w = smarm::spawn([&] {
        smarm::sleep(3ms);
        peer.write_all("q", 1);
    });
    EXPECT_EQ(smarm::select({rx, s.readable()}), 1u);
    char b;
    EXPECT_EQ(s.read_some(&b, 1, 5s), 1u);
    w.join();
}

SMARM_TEST(Net, PeerCloseIsEndOfStream) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    auto s = smarm::tcp_stream::connect("127.0.0.1", l.local_address().port(), 5s);
    {
        auto peer = l.accept(5s);
        peer.write_all("ab", 2);
    }  // closed
    char buf[8];
    std::size_t got = 0;
    while (std::size_t n = s.read_some(buf + got, sizeof buf - got, 5s))
        got += n;
    EXPECT_EQ(std::string(buf, got), "ab");
    EXPECT_THROW(s.read_exact(buf, 1, 5s), std::system_error);
}

SMARM_TEST(Net, AcceptTimeout) {
    auto l = smarm::tcp_listener::bind("127.0.0.1", 0);
    auto t0 = steady::now();
    EXPECT_THROW(l.accept(20ms), smarm::io_timeout);
    EXPECT_GE(steady::now() - t0, 20ms);
}

}  // namespace
