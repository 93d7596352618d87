// smarm-load's engine (load.hpp).
//
// Threads: the connection actors and the progress actor run on the runtime's
// schedulers. The counts are kept per OS thread (`stats_shard` in a
// smarm::detail::thread_shards), not per connection: a connection actor
// counts into the shard of the thread it runs on (run_state::here), taken
// right before it counts, with nothing that can park or yield in between,
// so one actor at a time writes a shard. Per connection they were ~40 KiB
// each (10,000 sockets: 400 MB), cold in cache at every message with 1,024
// sockets, and the progress actor walked all of them each second. The
// progress actor reads the shards (relaxed loads of single-writer counters,
// see histogram.hpp) and run() reads them after joining every connection
// (join is the synchronisation point for the final report).

#include "load.hpp"

#include <smarm/channel.hpp>
#include <smarm/io.hpp>
#include <smarm/net.hpp>
#include <smarm/runtime.hpp>

#include <smarm/detail/thread_shards.hpp>

#include <boost/beast/http/basic_parser.hpp>
// Boost.JSON header-only: its sources are compiled into this one unit.
#include <boost/json/src.hpp>

#include <netdb.h>
#include <sys/socket.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace smarm::load {

namespace bhttp = boost::beast::http;
using clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

// ---- URL ------------------------------------------------------------------

target parse_url(const std::string& url) {
    if (url.rfind("https://", 0) == 0 || url.rfind("wss://", 0) == 0)
        throw std::invalid_argument("URL \"" + url +
                                    "\": TLS is not supported (plain http:// or ws:// only)");
    target t;
    t.websocket = url.rfind("ws://", 0) == 0;
    const std::string scheme = t.websocket ? "ws://" : "http://";
    if (url.rfind(scheme, 0) != 0)
        throw std::invalid_argument("URL \"" + url + "\": must start with http:// or ws://");
    std::string rest = url.substr(scheme.size());
    auto slash = rest.find('/');
    std::string authority = rest.substr(0, slash);
    t.path = slash == std::string::npos ? "/" : rest.substr(slash);
    if (authority.empty()) throw std::invalid_argument("URL \"" + url + "\": no host");
    std::string port;
    if (authority[0] == '[') {  // [v6]:port
        auto close = authority.find(']');
        if (close == std::string::npos)
            throw std::invalid_argument("URL \"" + url + "\": unterminated [IPv6] host");
        t.host = authority.substr(1, close - 1);
        if (close + 1 < authority.size()) {
            if (authority[close + 1] != ':')
                throw std::invalid_argument("URL \"" + url + "\": junk after the host");
            port = authority.substr(close + 2);
        }
    } else {
        auto colon = authority.rfind(':');
        t.host = authority.substr(0, colon);
        if (colon != std::string::npos) port = authority.substr(colon + 1);
    }
    if (t.host.empty()) throw std::invalid_argument("URL \"" + url + "\": no host");
    if (!port.empty()) {
        char* end = nullptr;
        const long p = std::strtol(port.c_str(), &end, 10);
        if (*end != '\0' || p < 1 || p > 65535)
            throw std::invalid_argument("URL \"" + url + "\": port \"" + port +
                                        "\" is not in 1..65535");
        t.port = static_cast<std::uint16_t>(p);
    }
    t.host_header = authority;
    return t;
}

const char* error_name(error_kind k) {
    switch (k) {
        case error_kind::connect:
            return "connect";
        case error_kind::timeout:
            return "timeout";
        case error_kind::write:
            return "write";
        case error_kind::read:
            return "read";
        case error_kind::parse:
            return "parse";
        case error_kind::count:
            break;
    }
    return "?";
}

std::uint64_t report::error_total() const {
    std::uint64_t n = 0;
    for (auto e : errors)
        n += e;
    return n;
}

std::uint64_t report::bad_statuses() const {
    std::uint64_t n = 0;
    for (auto& [code, c] : statuses)
        if (code >= 400) n += c;
    return n;
}

namespace {

// ---- per-connection counters (one writer) -----------------------------------

struct counter {
    std::atomic<std::uint64_t> v{0};
    void add(std::uint64_t n = 1) noexcept { smarm::detail::bump(v, n); }
    std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

/// The counts of the connections that ran on one OS thread (see the top).
struct stats_shard {
    live_histogram latency;
    counter requests, bytes, connects;
    std::array<counter, static_cast<std::size_t>(error_kind::count)> errors;
    std::array<counter, 600> statuses;  // by code; 0 holds codes outside 100..599
    std::vector<counter> by_request;
    explicit stats_shard(std::size_t kinds) : by_request(kinds) {}
};

// ---- response parsing ---------------------------------------------------------

/// Beast's response parser with every callback a no-op but the status: the
/// body is counted, not stored.
class response_reader final : public bhttp::basic_parser<false> {
  public:
    unsigned status = 0;

  private:
    void on_request_impl(bhttp::verb, boost::beast::string_view, boost::beast::string_view, int,
                         boost::beast::error_code&) override {}
    void on_response_impl(int code, boost::beast::string_view, int,
                          boost::beast::error_code&) override {
        status = static_cast<unsigned>(code);
    }
    void on_field_impl(bhttp::field, boost::beast::string_view, boost::beast::string_view,
                       boost::beast::error_code&) override {}
    void on_header_impl(boost::beast::error_code&) override {}
    void on_body_init_impl(const boost::optional<std::uint64_t>&,
                           boost::beast::error_code&) override {}
    std::size_t on_body_impl(boost::beast::string_view b, boost::beast::error_code&) override {
        return b.size();
    }
    void on_chunk_header_impl(std::uint64_t, boost::beast::string_view,
                              boost::beast::error_code&) override {}
    std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view b,
                                   boost::beast::error_code&) override {
        return b.size();
    }
    void on_finish_impl(boost::beast::error_code&) override {}
};

struct run_state {
    run_state(const options& opts, std::string h)
        : o(opts), host(std::move(h)), kinds(opts.mix.requests().size()) {}
    const options& o;
    std::string host;  // resolved, numeric
    clock::time_point start, measure_from, end;
    const std::size_t kinds;

    /// The calling thread's shard of this run (smarm/detail/thread_shards.hpp):
    /// count into it at once, nothing that parks or yields in between.
    stats_shard& here() { return shards.mine(); }
    smarm::detail::thread_shards<stats_shard> shards{
        [k = kinds] { return std::make_unique<stats_shard>(k); }};
};

/// One connection's send schedule: open loop, rate / connections sends
/// per second, staggered across one interval by the connection's index;
/// closed loop, none.
struct schedule {
    bool open;
    nanoseconds interval;
    clock::time_point next;
    schedule(const run_state& rs, std::size_t index)
        : open(rs.o.rate > 0),
          interval(open ? nanoseconds(static_cast<std::int64_t>(1e9 * rs.o.connections / rs.o.rate))
                        : nanoseconds::zero()),
          next(rs.start + (open ? interval * static_cast<std::int64_t>(index) /
                                      static_cast<std::int64_t>(rs.o.connections)
                                : nanoseconds::zero())) {}
    /// The intended time of the next send (closed loop: `now`), after
    /// sleeping until it; nullopt once the schedule passes `end`.
    std::optional<clock::time_point> turn(clock::time_point now, clock::time_point end) {
        if (!open) return now;
        if (next >= end) return std::nullopt;
        if (next > now) smarm::sleep(next - now);
        const auto t = next;
        next += interval;
        return t;
    }
    /// A turn intended at `intended` whose `timeout` ran out by `now`
    /// before it could be sent: a timeout the server never sees (load.hpp).
    static bool expired(clock::time_point intended, clock::time_point now,
                        nanoseconds timeout) noexcept {
        return now - intended >= timeout;
    }
};

/// Counts an error of kind `k` (none after the run's end: the report's
/// window). A turn that expired unsent (schedule::expired) is a timeout.
void count_error(run_state& rs, error_kind k) {
    if (clock::now() < rs.end) rs.here().errors[static_cast<std::size_t>(k)].add();
}

/// Resolves once, so a connection per request does not resolve per request.
std::string resolve(const std::string& host) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0)
        throw std::runtime_error("cannot resolve \"" + host + "\": " + ::gai_strerror(rc));
    char buf[NI_MAXHOST];
    const int rc =
        ::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
    ::freeaddrinfo(res);
    if (rc != 0) throw std::runtime_error("cannot resolve \"" + host + "\": " + ::gai_strerror(rc));
    return buf;
}

nanoseconds left_until(clock::time_point t) {
    auto d = t - clock::now();
    return d > nanoseconds::zero() ? std::chrono::duration_cast<nanoseconds>(d) : nanoseconds(1);
}

/// A client frame (FIN, masked with the zero key: the payload as is).
std::string ws_frame(unsigned opcode, std::string_view payload) {
    std::string f;
    f.push_back(static_cast<char>(0x80 | opcode));
    const std::size_t n = payload.size();
    if (n < 126) {
        f.push_back(static_cast<char>(0x80 | n));
    } else if (n < 65536) {
        f.push_back(static_cast<char>(0x80 | 126));
        f.push_back(static_cast<char>(n >> 8));
        f.push_back(static_cast<char>(n & 0xff));
    } else {
        f.push_back(static_cast<char>(0x80 | 127));
        for (int i = 7; i >= 0; --i)
            f.push_back(static_cast<char>((static_cast<std::uint64_t>(n) >> (8 * i)) & 0xff));
    }
    f.append(4, '\0');  // the masking key
    f.append(payload);
    return f;
}

/// One WebSocket connection's loop (WebSocket mode, load.hpp).
void drive_ws(run_state& rs, std::size_t index) {
    const options& o = rs.o;
    std::mt19937_64 rng(o.seed * 0x9e3779b97f4a7c15ull + index);
    std::vector<std::string> frames;
    std::vector<double> weights;
    for (auto& [size, w] : o.ws.sizes) {
        frames.push_back(ws_frame(o.ws.binary ? 0x2 : 0x1, std::string(size, 'x')));
        weights.push_back(w);
    }
    std::discrete_distribution<std::size_t> pick(weights.begin(), weights.end());
    std::vector<unsigned char> buf(64 * 1024);
    std::size_t have = 0;
    tcp_stream s;
    schedule sched(rs, index);
    const bool open_loop = sched.open;
    auto fail = [&](error_kind k) {
        count_error(rs, k);
        s.close();
        have = 0;
    };
    // Reads until buf holds `n` bytes; false (counted) on a failure.
    auto need = [&](std::size_t n, clock::time_point deadline) {
        if (n > buf.size()) buf.resize(std::max(n, buf.size() * 2));
        while (have < n) {
            std::size_t got = 0;
            try {
                got = s.read_some_until(buf.data() + have, buf.size() - have, deadline);
            } catch (const io_timeout&) {
                fail(error_kind::timeout);
                return false;
            } catch (const std::system_error&) {
                fail(error_kind::read);
                return false;
            }
            if (got == 0) {
                fail(error_kind::read);
                return false;
            }
            have += got;
        }
        return true;
    };
    auto consume = [&](std::size_t n) {
        std::memmove(buf.data(), buf.data() + n, have - n);
        have -= n;
    };
    const std::string upgrade = "GET " + o.to.path + " HTTP/1.1\r\nHost: " + o.to.host_header +
                                "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                "Sec-WebSocket-Key: c21hcm0tbG9hZC1rZXkxMg==\r\n"
                                "Sec-WebSocket-Version: 13\r\n\r\n";
    // Connects and upgrades; false (counted) on a failure.
    auto open = [&](clock::time_point deadline) {
        try {
            s = tcp_stream::connect(rs.host, o.to.port, std::min(o.timeout, left_until(rs.end)));
            rs.here().connects.add();
            s.write_all_until(upgrade.data(), upgrade.size(), deadline);
        } catch (const io_timeout&) {
            fail(error_kind::timeout);
            return false;
        } catch (const std::system_error&) {
            fail(error_kind::connect);
            if (!open_loop) smarm::sleep(std::chrono::milliseconds(10));
            return false;
        }
        for (std::size_t scanned = 0;;) {
            if (!need(scanned + 4, deadline)) return false;
            const std::string_view head(reinterpret_cast<const char*>(buf.data()), have);
            const auto end = head.find("\r\n\r\n");
            if (end == std::string_view::npos) {
                scanned = have - 3;
                if (have > 16 * 1024) {
                    fail(error_kind::parse);
                    return false;
                }
                continue;
            }
            if (head.rfind("HTTP/1.1 101", 0) != 0) {
                fail(error_kind::parse);
                return false;
            }
            consume(end + 4);
            return true;
        }
    };
    for (;;) {
        auto now = clock::now();
        if (now >= rs.end) return;
        if (!s.is_open()) {
            if (!open(std::min(now + o.timeout, rs.end))) continue;
            now = clock::now();  // the handshake is not the message's time
        }
        const auto turn = sched.turn(now, rs.end);
        if (!turn) {
            // No message left in its schedule: the socket stays open to the
            // end (-c N sockets are open for the whole run).
            smarm::sleep(left_until(rs.end));
            return;
        }
        const auto intended = *turn;
        if (schedule::expired(intended, now, o.timeout)) {
            count_error(rs, error_kind::timeout);  // never sent
            continue;
        }
        const std::size_t which = frames.size() == 1 ? 0 : pick(rng);
        const auto deadline = std::min(intended + o.timeout, rs.end);
        try {
            s.write_all_until(frames[which].data(), frames[which].size(), deadline);
        } catch (const io_timeout&) {
            fail(error_kind::timeout);
            continue;
        } catch (const std::system_error&) {
            fail(error_kind::write);
            continue;
        }
        // The echo: data frames to a FIN; pings answered, pongs skipped.
        std::uint64_t got = 0;
        bool ok = false;
        while (s.is_open()) {
            if (!need(2, deadline)) break;
            const unsigned op = buf[0] & 0x0f;
            const bool fin = buf[0] & 0x80;
            std::uint64_t len = buf[1] & 0x7f;
            std::size_t off = 2;
            if (len >= 126) {
                off += len == 126 ? 2 : 8;
                if (!need(off, deadline)) break;
                len = 0;
                for (std::size_t i = 2; i < off; ++i)
                    len = (len << 8) | buf[i];
            }
            if ((buf[1] & 0x80) || len > (std::uint64_t{1} << 32)) {  // masked, or absurd
                fail(error_kind::parse);
                break;
            }
            if (!need(off + static_cast<std::size_t>(len), deadline)) break;
            if (op == 0x9) {  // ping: pong with its payload
                const std::string pong = ws_frame(
                    0xa, std::string_view(reinterpret_cast<const char*>(buf.data() + off), len));
                consume(off + static_cast<std::size_t>(len));
                try {
                    s.write_all_until(pong.data(), pong.size(), deadline);
                } catch (const std::system_error&) {
                    fail(error_kind::write);
                    break;
                }
                continue;
            }
            consume(off + static_cast<std::size_t>(len));
            if (op == 0xa) continue;
            if (op == 0x8) {  // the server closed
                fail(error_kind::read);
                break;
            }
            got += len;
            if (fin) {
                ok = true;
                break;
            }
        }
        if (!ok) continue;
        const auto done = clock::now();
        if (done >= rs.end) return;
        if (done >= rs.measure_from) {
            stats_shard& cs = rs.here();
            cs.latency.record(static_cast<std::uint64_t>(
                std::chrono::duration_cast<nanoseconds>(done - intended).count()));
            cs.requests.add();
            cs.bytes.add(got);
            cs.by_request[0].add();
        }
    }
}

/// One connection's loop (see load.hpp for what is measured).
void drive(run_state& rs, std::size_t index) {
    const options& o = rs.o;
    std::mt19937_64 rng(o.seed * 0x9e3779b97f4a7c15ull + index);
    const bool fixed = o.mix.is_fixed();
    std::string req;
    if (fixed) o.mix.render(0, rng, 0, index, o.to.host_header, !o.keep_alive, req);
    std::vector<char> buf(16 * 1024);
    std::size_t have = 0;  // unparsed bytes at the front of buf
    tcp_stream s;
    schedule sched(rs, index);
    const bool open_loop = sched.open;
    auto fail = [&](error_kind k) {
        count_error(rs, k);
        s.close();
        have = 0;
    };
    for (std::uint64_t seq = 0;; ++seq) {
        auto now = clock::now();
        if (now >= rs.end) return;
        const auto turn = sched.turn(now, rs.end);
        if (!turn) return;
        const auto intended = *turn;
        if (schedule::expired(intended, now, o.timeout)) {
            count_error(rs, error_kind::timeout);  // never sent
            continue;
        }
        const auto deadline = std::min(intended + o.timeout, rs.end);
        if (!s.is_open()) {
            try {
                // The connect is part of the request's time (--timeout).
                s = tcp_stream::connect(rs.host, o.to.port, left_until(deadline));
                rs.here().connects.add();
            } catch (const io_timeout&) {
                fail(error_kind::timeout);
                continue;
            } catch (const std::system_error&) {
                fail(error_kind::connect);
                // Refused: do not spin; a closed loop retries after a pause.
                if (!open_loop) smarm::sleep(std::chrono::milliseconds(10));
                continue;
            }
        }
        std::size_t which = 0;
        if (!fixed) {
            which = o.mix.pick(rng);
            o.mix.render(which, rng, seq, index, o.to.host_header, !o.keep_alive, req);
        }
        try {
            s.write_all_until(req.data(), req.size(), deadline);
        } catch (const io_timeout&) {
            fail(error_kind::timeout);
            continue;
        } catch (const std::system_error&) {
            fail(error_kind::write);
            continue;
        }
        response_reader p;
        p.body_limit(boost::none);
        p.eager(true);  // parse the body in the same put() as the header
        boost::beast::error_code ec;
        std::size_t used = 0;  // bytes of buf this response consumed
        bool ok = false, dead = false;
        for (;;) {
            while (have > used && !p.is_done()) {
                const auto n = p.put(boost::asio::buffer(buf.data() + used, have - used), ec);
                used += n;
                if (ec == bhttp::error::need_more) {
                    ec = {};
                    break;
                }
                if (ec || n == 0) break;
            }
            if (ec) {
                fail(error_kind::parse);
                dead = true;
                break;
            }
            if (p.is_done()) {
                ok = true;
                break;
            }
            if (used > 0 && used == have) used = have = 0;  // all consumed: reuse from the start
            if (have == buf.size()) {
                if (used > 0) {  // slide the unparsed tail to the front
                    std::memmove(buf.data(), buf.data() + used, have - used);
                    have -= used;
                    used = 0;
                } else {
                    buf.resize(buf.size() * 2);
                }
            }
            std::size_t n = 0;
            try {
                n = s.read_some_until(buf.data() + have, buf.size() - have, deadline);
            } catch (const io_timeout&) {
                fail(error_kind::timeout);
                dead = true;
                break;
            } catch (const std::system_error&) {
                fail(error_kind::read);
                dead = true;
                break;
            }
            if (n == 0) {  // the peer closed: complete only if the body ran to EOF
                // Nothing at all is a lost request: Beast's put_eof would
                // complete an empty message (status 0) without a byte.
                if (p.got_some()) p.put_eof(ec);
                if (p.got_some() && !ec && p.is_done()) {
                    ok = true;
                    s.close();
                } else {
                    fail(error_kind::read);
                    dead = true;
                }
                break;
            }
            have += n;
        }
        if (dead || !ok) continue;
        const auto done = clock::now();
        if (done >= rs.end) return;
        if (done >= rs.measure_from) {
            stats_shard& cs = rs.here();
            cs.latency.record(static_cast<std::uint64_t>(
                std::chrono::duration_cast<nanoseconds>(done - intended).count()));
            cs.requests.add();
            cs.bytes.add(used);
            cs.statuses[p.status >= 100 && p.status < 600 ? p.status : 0].add();
            cs.by_request[which].add();
        }
        // Bytes past this response (a server answering what was not asked)
        // stay for the next parse.
        if (used < have) {
            std::memmove(buf.data(), buf.data() + used, have - used);
            have -= used;
        } else {
            have = 0;
        }
        if (!o.keep_alive || !p.keep_alive()) {
            s.close();
            have = 0;
        }
    }
}

}  // namespace

std::vector<std::pair<std::size_t, double>> parse_ws_sizes(const std::string& text) {
    std::vector<std::pair<std::size_t, double>> out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        const auto bad = [&](const char* why) {
            return std::invalid_argument("--ws-sizes item \"" + item + "\": " + why);
        };
        const auto colon = item.find(':');
        std::string size = item.substr(0, colon);
        double weight = 1;
        if (colon != std::string::npos) {
            try {
                std::size_t used = 0;
                weight = std::stod(item.substr(colon + 1), &used);
                if (used != item.size() - colon - 1) throw bad("the weight is not a number");
            } catch (const std::logic_error&) {
                throw bad("the weight is not a number");
            }
            if (!(weight > 0)) throw bad("the weight must be positive");
        }
        std::uint64_t mult = 1;
        for (auto [suffix, m] :
             {std::pair{"KiB", 1024ull}, {"MiB", 1ull << 20}, {"K", 1024ull}, {"M", 1ull << 20}}) {
            const std::string sfx = suffix;
            if (size.size() > sfx.size() && size.ends_with(sfx)) {
                size.resize(size.size() - sfx.size());
                mult = m;
                break;
            }
        }
        if (size.empty() || size.find_first_not_of("0123456789") != std::string::npos)
            throw bad("the size is not a number of bytes");
        const std::uint64_t bytes = std::stoull(size) * mult;
        if (bytes > (1ull << 30)) throw bad("a message is at most 1 GiB");
        out.emplace_back(static_cast<std::size_t>(bytes), weight);
    }
    if (out.empty()) throw std::invalid_argument("--ws-sizes: no sizes");
    return out;
}

namespace {

std::string fmt_ns(double ns) {
    char b[32];
    if (ns < 1e3)
        std::snprintf(b, sizeof b, "%.0fns", ns);
    else if (ns < 1e6)
        std::snprintf(b, sizeof b, "%.2fus", ns / 1e3);
    else if (ns < 1e9)
        std::snprintf(b, sizeof b, "%.2fms", ns / 1e6);
    else
        std::snprintf(b, sizeof b, "%.2fs", ns / 1e9);
    return b;
}

}  // namespace

report run(const options& o) {
    if (o.connections == 0) throw std::invalid_argument("connections must be at least 1");
    run_state rs(o, resolve(o.to.host));
    rs.start = clock::now();
    rs.measure_from = rs.start + o.warmup;
    rs.end = rs.measure_from + o.duration;

    std::vector<join_handle> hs;
    hs.reserve(o.connections);
    for (unsigned i = 0; i < o.connections; ++i)
        hs.push_back(spawn([&rs, i] {
            if (rs.o.to.websocket)
                drive_ws(rs, i);
            else
                drive(rs, i);
        }));

    auto [stop_tx, stop_rx] = channel<int>();
    join_handle progress;
    if (o.progress)
        progress = spawn([&rs, &o, rx = std::move(stop_rx)] {
            std::uint64_t last = 0;
            auto last_t = clock::now();
            for (;;) {
                auto r = rx.recv_timeout(std::chrono::seconds(1));
                if (r.status != recv_status::timeout) return;
                histogram h;
                std::uint64_t errors = 0;
                rs.shards.each([&](const stats_shard& c) {
                    c.latency.merge_into(h);
                    for (auto& e : c.errors)
                        errors += e.get();
                });
                const auto now = clock::now();
                const double dt = std::chrono::duration<double>(now - last_t).count();
                char line[200];
                const bool warming = now < rs.measure_from;
                std::snprintf(line, sizeof line, "[%5.1fs] %s%10.0f req/s  errors %llu  p99 %s",
                              std::chrono::duration<double>(now - rs.start).count(),
                              warming ? "warm-up " : "", static_cast<double>(h.count() - last) / dt,
                              static_cast<unsigned long long>(errors),
                              fmt_ns(static_cast<double>(h.percentile(99))).c_str());
                last = h.count();
                last_t = now;
                o.progress(line);
            }
        });
    for (auto& h : hs)
        (void)h.join();
    { auto drop = std::move(stop_tx); }  // closes the progress actor's inbox
    if (progress.joinable()) (void)progress.join();

    report r;
    r.seconds = std::chrono::duration<double>(o.duration).count();
    rs.shards.each([&](const stats_shard& c) {
        c.latency.merge_into(r.latency);
        r.requests += c.requests.get();
        r.bytes += c.bytes.get();
        r.connects += c.connects.get();
        for (std::size_t k = 0; k < r.errors.size(); ++k)
            r.errors[k] += c.errors[k].get();
        for (unsigned code = 0; code < 600; ++code)
            if (auto n = c.statuses[code].get()) r.statuses[code] += n;
        for (std::size_t k = 0; k < rs.kinds; ++k)
            if (auto n = c.by_request[k].get()) r.by_request[o.mix.requests()[k].name] += n;
    });
    return r;
}

namespace {
constexpr double k_percentiles[] = {50, 75, 90, 99, 99.9, 99.99};
}

std::string format_report(const options& o, const report& r) {
    std::ostringstream out;
    out << "smarm-load: " << (o.to.websocket ? "ws://" : "http://") << o.to.host_header
        << (o.mix.requests().size() == 1 ? o.mix.requests().front().path_text
                                         : std::string(" (scenario)"))
        << ", " << o.connections << (o.connections == 1 ? " connection, " : " connections, ")
        << o.threads << (o.threads == 1 ? " thread, " : " threads, ")
        << (o.rate > 0 ? "open loop at " + std::to_string(static_cast<long long>(o.rate)) + " req/s"
                       : std::string("closed loop"))
        << ", "
        << (o.to.websocket ? "echo round trips"
            : o.keep_alive ? "keep-alive"
                           : "a connection per request")
        << ", " << std::chrono::duration<double>(o.duration).count() << " s";
    if (o.warmup.count() > 0)
        out << " after " << std::chrono::duration<double>(o.warmup).count() << " s warm-up";
    out << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "  requests   %llu in %.2f s = %.1f req/s, %.2f MB/s read\n",
                  static_cast<unsigned long long>(r.requests), r.seconds, r.rate(),
                  static_cast<double>(r.bytes) / r.seconds / 1e6);
    out << line;
    out << "  latency    mean " << fmt_ns(r.latency.mean());
    for (double p : k_percentiles) {
        std::snprintf(line, sizeof line, "  p%g %s", p,
                      fmt_ns(static_cast<double>(r.latency.percentile(p))).c_str());
        out << line;
    }
    out << "  max " << fmt_ns(static_cast<double>(r.latency.max())) << "\n";
    out << "  statuses  ";
    for (auto& [code, n] : r.statuses)
        out << " " << (code == 0 ? std::string("other") : std::to_string(code)) << ": " << n;
    if (r.statuses.empty()) out << " none";
    out << "\n  errors    ";
    if (r.error_total() == 0) out << " none";
    for (std::size_t k = 0; k < r.errors.size(); ++k)
        if (r.errors[k] != 0)
            out << " " << error_name(static_cast<error_kind>(k)) << ": " << r.errors[k];
    out << "\n  connections opened " << r.connects << "\n";
    if (r.by_request.size() > 1) {
        out << "  by request";
        for (auto& [name, n] : r.by_request)
            out << "  " << name << ": " << n;
        out << "\n";
    }
    return out.str();
}

std::string format_json(const options& o, const report& r) {
    namespace json = boost::json;
    json::object lat;
    lat["mean"] = r.latency.mean() / 1e3;
    for (double p : k_percentiles) {
        char k[16];
        std::snprintf(k, sizeof k, "p%g", p);
        lat[k] = static_cast<double>(r.latency.percentile(p)) / 1e3;
    }
    lat["max"] = static_cast<double>(r.latency.max()) / 1e3;
    json::object statuses, errors, by;
    for (auto& [code, n] : r.statuses)
        statuses[code == 0 ? std::string("other") : std::to_string(code)] = n;
    for (std::size_t k = 0; k < r.errors.size(); ++k)
        errors[error_name(static_cast<error_kind>(k))] = r.errors[k];
    for (auto& [name, n] : r.by_request)
        by[name] = n;
    json::object cfg;
    cfg["target"] = (o.to.websocket ? "ws://" : "http://") + o.to.host_header;
    if (o.to.websocket) {
        json::array sizes;
        for (auto& [bytes, weight] : o.ws.sizes)
            sizes.push_back(json::object{{"bytes", bytes}, {"weight", weight}});
        cfg["ws_sizes"] = std::move(sizes);
        cfg["ws_binary"] = o.ws.binary;
    }
    cfg["connections"] = o.connections;
    cfg["threads"] = o.threads;
    cfg["duration_s"] = std::chrono::duration<double>(o.duration).count();
    cfg["warmup_s"] = std::chrono::duration<double>(o.warmup).count();
    cfg["rate"] = o.rate;
    cfg["keep_alive"] = o.keep_alive;
    json::object root;
    root["config"] = std::move(cfg);
    root["requests"] = r.requests;
    root["seconds"] = r.seconds;
    root["rate"] = r.rate();
    root["bytes"] = r.bytes;
    root["connections_opened"] = r.connects;
    root["latency_us"] = std::move(lat);
    root["statuses"] = std::move(statuses);
    root["errors"] = std::move(errors);
    root["error_total"] = r.error_total();
    root["by_request"] = std::move(by);
    return json::serialize(root) + "\n";
}

void write_plot(const report& r, const std::string& file, const std::string& title) {
    const bool svg = file.size() > 4 && file.compare(file.size() - 4, 4, ".svg") == 0;
    const bool png = file.size() > 4 && file.compare(file.size() - 4, 4, ".png") == 0;
    if (!svg && !png) throw std::runtime_error("plot \"" + file + "\": use a .png or .svg name");
    if (r.latency.count() == 0) throw std::runtime_error("plot: no latencies were recorded");
    // Latency by percentile on the usual HDR axis: x = 1 / (1 - p), log scale.
    const std::string data = file + ".dat";
    {
        std::ofstream d(data);
        if (!d) throw std::runtime_error("plot: cannot write " + data);
        for (double nines = 0; nines <= 5.0; nines += 0.05) {
            const double p = 100.0 * (1.0 - std::pow(10.0, -nines));
            d << std::pow(10.0, nines) << " " << p << " "
              << static_cast<double>(r.latency.percentile(p)) / 1e6 << "\n";
        }
    }
    const std::string script = file + ".gp";
    {
        std::ofstream g(script);
        if (!g) throw std::runtime_error("plot: cannot write " + script);
        g << (png ? "set terminal pngcairo size 900,500\n" : "set terminal svg size 900,500\n")
          << "set output '" << file << "'\n"
          << "set title '" << title << "'\n"
          << "set logscale x\n"
          // Tic labels are format strings: '%%' is a literal percent sign.
          << "set xtics ('0%%' 1, '90%%' 10, '99%%' 100, '99.9%%' 1000, '99.99%%' 10000, "
             "'99.999%%' 100000)\n"
          << "set xlabel 'percentile'\nset ylabel 'latency (ms)'\nset grid\n"
          << "plot '" << data << "' using 1:3 with lines lw 2 title 'latency'\n";
    }
    struct remove_after {
        const std::string &data, &script;
        ~remove_after() {
            std::remove(data.c_str());
            std::remove(script.c_str());
        }
    } const gone{data, script};
    run_gnuplot(script);
}

void run_gnuplot(const std::string& script) {
    const std::string cmd = "gnuplot '" + script + "' 2>&1";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) throw std::runtime_error("plot: cannot run gnuplot");
    std::string out;
    char b[256];
    while (std::fgets(b, sizeof b, pipe) != nullptr)
        out += b;
    const int rc = ::pclose(pipe);
    if (rc != 0)
        throw std::runtime_error("plot: gnuplot failed (is gnuplot-nox installed?)" +
                                 (out.empty() ? std::string() : ": " + out));
}

}  // namespace smarm::load
