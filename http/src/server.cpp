// The server: listener actor, connection supervisor, shutdown and signals.
//
// Actors: the listener (accepts; spawns each connection through the
// supervisor), the connection supervisor (temporary children, capped at
// max_connections), one actor per connection, and, during a stop, a drainer
// that waits for connections to end and stops stragglers at the deadline.
// `wait()` monitors the supervisor, which ends last.

#include <smarm/http/server.hpp>
#include <smarm/monitor.hpp>
#include <smarm/supervisor.hpp>

#include <smarm/detail/spinlock.hpp>

#include <spdlog/async.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <mutex>
#include <system_error>
#include <unordered_map>

#include "connection.hpp"
#include "stream.hpp"
#include "tls.hpp"

namespace smarm::http {

struct server::state {
    explicit state(server_config c, router r) : sh(std::move(c), std::move(r)) {}

    detail::shared sh;
    std::unique_ptr<boost::asio::ssl::context> tls;  // set when cfg.tls is
    tcp_listener listener;
    socket_address bound;
    supervisor_ref sup;
    pid listener_pid;
    pid signal_pid;
    bool started = false;
    std::atomic<bool> stopping{false};

    // Live connections and whether each is idle (see connection.hpp).
    smarm::detail::spinlock mu;
    struct conn {
        pid id;
        detail::conn_watch* watch;
    };
    std::unordered_map<std::uint64_t, conn> conns;  // guarded by mu
    bool listener_open = false;                     // guarded by mu
    std::atomic<std::uint64_t> next_conn{1};
    pid reaper_pid;

    /// request_stop every connection whose watch satisfies `pick` (read
    /// under mu; the stops are sent after it is released).
    template <class Pick>
    void stop_where(Pick pick) {
        std::vector<pid> targets;
        {
            std::lock_guard g(mu);
            for (auto& [id, c] : conns)
                if (pick(*c.watch)) targets.push_back(c.id);
        }
        for (pid p : targets)
            smarm::request_stop(p);
    }
    /// request_stop every connection (idle_only: those parked between requests).
    void stop_connections(bool idle_only) {
        stop_where([idle_only](const detail::conn_watch& w) {
            return !idle_only || w.idle.load(std::memory_order_seq_cst);
        });
    }
    /// request_stop every connection idle past its reap_at.
    void reap_idle(std::int64_t now) {
        stop_where([now](const detail::conn_watch& w) {
            return w.idle.load(std::memory_order_seq_cst) &&
                   w.reap_at.load(std::memory_order_relaxed) <= now;
        });
    }
};

namespace {

std::shared_ptr<spdlog::logger> stdout_access_logger() {
    static std::once_flag once;
    static std::shared_ptr<spdlog::logger> log;
    std::call_once(once, [] {
        // Asynchronous, and it drops the oldest lines rather than block a
        // scheduler thread when stdout cannot keep up.
        spdlog::init_thread_pool(8192, 1);
        log = std::make_shared<spdlog::async_logger>(
            "access", std::make_shared<spdlog::sinks::stdout_sink_mt>(), spdlog::thread_pool(),
            spdlog::async_overflow_policy::overrun_oldest);
        log->set_pattern("[%Y-%m-%dT%H:%M:%S.%e] %v");
    });
    return log;
}

std::shared_ptr<spdlog::logger> access_logger(const server_config& cfg) {
    if (cfg.access_log_file.empty()) return stdout_access_logger();
    std::shared_ptr<spdlog::sinks::sink> sink;
    try {
        sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(cfg.access_log_file);
    } catch (const spdlog::spdlog_ex& e) {
        throw std::runtime_error("smarm::http: cannot open the access log \"" +
                                 cfg.access_log_file + "\": " + e.what());
    }
    auto log = std::make_shared<spdlog::logger>("access", std::move(sink));
    log->set_pattern("[%Y-%m-%dT%H:%M:%S.%e] %v");
    log->flush_on(spdlog::level::warn);
    return log;
}

/// Refuses a connection past the cap: a short 503 written without waiting
/// (the listener must not stall on a slow peer), then close.
void reject(tcp_stream& conn, const server_config& cfg) {
    std::string out;
    detail::append_simple(out, cfg, status::service_unavailable, false, 11);
    (void)::send(conn.native_handle(), out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    conn.close();
}

void run_connection(const std::shared_ptr<server::state>& st, std::uint64_t id, tcp_stream& conn) {
    detail::conn_watch watch;
    {
        std::lock_guard g(st->mu);
        st->conns.emplace(id, server::state::conn{self_pid(), &watch});
    }
    // Counted here, not by the listener after start_child returns: the
    // connection may be served and its client gone before the listener
    // runs again (stats() lagged a served connection under ASan).
    st->sh.accepted.fetch_add(1, std::memory_order_relaxed);
    st->sh.active.fetch_add(1, std::memory_order_relaxed);
    struct leave {
        server::state& st;
        std::uint64_t id;
        tcp_stream& conn;
        ~leave() {
            conn.close();
            std::lock_guard g(st.mu);
            st.conns.erase(id);
            st.sh.active.fetch_sub(1, std::memory_order_relaxed);
        }
    } guard{*st, id, conn};
    detail::conn_ctx c{st->sh, id, conn.peer_address(), &watch};
    detail::actor_stream s(conn);
    if (st->tls) {
        detail::tls_stream ts(s, *st->tls);
        if (!ts.handshake(std::chrono::steady_clock::now() + st->sh.cfg.header_timeout)) return;
        detail::serve_connection(ts, c);
        return;
    }
    detail::serve_connection(s, c);
}

void listen_loop(const std::shared_ptr<server::state>& st) {
    // Stopped (server::stop) while parked in accept: close the socket at
    // once so new connections are refused rather than left in the backlog.
    struct closer {
        server::state& st;
        ~closer() {
            std::lock_guard g(st.mu);  // stop() may be shutting the socket down
            st.listener_open = false;
            st.listener.close();
        }
    } guard{*st};
    // Accept failures (EMFILE, ENFILE, ENOBUFS...) last as long as their
    // cause: back off 5 ms doubling to 1 s while they do, log the first and
    // then at most one line per 10 s with the count, and say when accepting
    // works again. (Logging each one filled the log 100 times a second.)
    using clock = std::chrono::steady_clock;
    std::chrono::milliseconds backoff{0};
    std::uint64_t unlogged = 0;
    clock::time_point last_log{};
    for (;;) {
        tcp_stream conn;
        try {
            conn = st->listener.accept();
        } catch (const std::system_error& e) {
            if (st->stopping.load()) return;  // stop() shut the socket down
            st->sh.accept_errors.fetch_add(1, std::memory_order_relaxed);
            const auto now = clock::now();
            if (backoff.count() == 0 || now - last_log >= std::chrono::seconds(10)) {
                if (unlogged == 0)
                    spdlog::error("http: accept failed: {} (retrying with backoff)", e.what());
                else
                    spdlog::error("http: accept failed: {} ({} more failures since the last line)",
                                  e.what(), unlogged);
                unlogged = 0;
                last_log = now;
            } else {
                ++unlogged;
            }
            backoff = std::clamp(backoff * 2, std::chrono::milliseconds(5),
                                 std::chrono::milliseconds(1000));
            smarm::sleep(backoff);
            continue;
        }
        if (backoff.count() != 0) {
            spdlog::info("http: accepting again ({} failures not logged)", unlogged);
            backoff = std::chrono::milliseconds(0);
            unlogged = 0;
        }
        if (st->sh.active.load(std::memory_order_relaxed) >= st->sh.cfg.max_connections) {
            st->sh.rejected.fetch_add(1, std::memory_order_relaxed);
            reject(conn, st->sh.cfg);
            continue;
        }
        const std::uint64_t id = st->next_conn.fetch_add(1, std::memory_order_relaxed);
        auto shared_conn = std::make_shared<tcp_stream>(std::move(conn));
        child_spec spec{"conn-" + std::to_string(id),
                        [st, id, shared_conn] { run_connection(st, id, *shared_conn); },
                        restart_policy::temporary};
        try {
            (void)start_child(st->sup, std::move(spec));
        } catch (const std::runtime_error&) {
            st->sh.rejected.fetch_add(1, std::memory_order_relaxed);
            reject(*shared_conn, st->sh.cfg);
        }
    }
}

/// Stops connections idle past their limit (connection.hpp). It wakes every
/// eighth of the shorter of the header and idle timeouts (5 ms..1 s), so a
/// limit is enforced never early and at most that much late.
void reap_loop(const std::shared_ptr<server::state>& st) {
    using namespace std::chrono;
    const auto& cfg = st->sh.cfg;
    const nanoseconds period = std::clamp<nanoseconds>(
        std::min(cfg.header_timeout, cfg.idle_timeout) / 8, milliseconds(5), seconds(1));
    for (;;) {
        smarm::sleep(period);
        try {
            st->reap_idle(detail::coarse_now().time_since_epoch().count());
        } catch (const smarm::stopped&) {
            throw;
        } catch (const std::exception& e) {  // out of memory: idle limits must outlive it
            spdlog::error("http: reaping idle connections failed: {}", e.what());
        }
    }
}

// ---- signals: a self-pipe per watching server ----------------------------
//
// The handler counts the signal and writes a byte to every slot's pipe. A
// server that asks for signals leases a slot; its watcher actor waits on
// that slot's read end (one waiting actor per fd: two watchers on one pipe,
// an old server's still draining beside its restarted successor, made the
// second one fail and left SIGTERM unanswered once the first ended). Pipes
// are created once and never closed, so the handler never writes to a
// descriptor that was closed and reused. The handlers are installed while
// any lease is held and reset to the default when the last one ends (an old
// server's destructor resetting them under its successor let SIGTERM kill
// the process without a drain). g_signal_mu guards the slots' leases, their
// creation and the sigaction calls; the handler touches only atomics.

constexpr std::size_t signal_slots = 16;
struct signal_slot {
    // The handler's only view: -1 until the pipe exists; never reset.
    // Relaxed: an int store is the whole publication (no data behind it).
    std::atomic<int> write_fd{-1};
    int read_fd = -1;     // guarded by g_signal_mu (then read by the lessee)
    bool leased = false;  // guarded by g_signal_mu
};
signal_slot g_signal_slots[signal_slots];
std::mutex g_signal_mu;
std::size_t g_signal_leases = 0;  // guarded by g_signal_mu
// Signals received so far; relaxed: a watcher rereads it after every wake.
std::atomic<int> g_signal_count{0};

extern "C" void on_shutdown_signal(int) {
    int saved = errno;
    g_signal_count.fetch_add(1, std::memory_order_relaxed);
    char b = 1;
    for (auto& slot : g_signal_slots)
        if (int fd = slot.write_fd.load(std::memory_order_relaxed); fd >= 0)
            (void)!::write(fd, &b, 1);
    errno = saved;
}

void set_shutdown_handlers(void (*handler)(int)) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
}

/// One slot for one watcher actor, held by the actor's closure.
class signal_lease {
  public:
    signal_lease() {
        std::lock_guard g(g_signal_mu);
        for (std::size_t i = 0; i < signal_slots; ++i) {
            signal_slot& slot = g_signal_slots[i];
            if (slot.leased) continue;
            if (slot.read_fd < 0) {
                int p[2];
                if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
                    throw std::system_error(errno, std::generic_category(),
                                            "smarm::http::server::stop_on_signals: pipe2");
                slot.read_fd = p[0];
                slot.write_fd.store(p[1], std::memory_order_relaxed);
            }
            char b[64];  // bytes of signals before this lease: not ours
            while (::read(slot.read_fd, b, sizeof b) > 0) {
            }
            slot.leased = true;
            index_ = i;
            if (g_signal_leases++ == 0) set_shutdown_handlers(on_shutdown_signal);
            return;
        }
        throw std::runtime_error("smarm::http::server::stop_on_signals: more than " +
                                 std::to_string(signal_slots) +
                                 " servers watch SIGTERM/SIGINT at once");
    }
    ~signal_lease() {
        std::lock_guard g(g_signal_mu);
        g_signal_slots[index_].leased = false;
        if (--g_signal_leases == 0) set_shutdown_handlers(SIG_DFL);
    }
    signal_lease(const signal_lease&) = delete;
    signal_lease& operator=(const signal_lease&) = delete;
    int fd() const noexcept { return g_signal_slots[index_].read_fd; }

  private:
    std::size_t index_ = 0;
};

}  // namespace

server::server(server_config cfg, router r)
    : st_(std::make_shared<state>(std::move(cfg), std::move(r))) {}

// The signal watcher (if any) ends with the drain and gives its lease back.
server::~server() = default;

void server::start() {
    if (st_->started) throw std::logic_error("smarm::http::server::start: already started");
    if (st_->sh.cfg.tls) st_->tls = detail::make_tls_context(*st_->sh.cfg.tls);
    if (st_->sh.cfg.access_log) st_->sh.access = access_logger(st_->sh.cfg);
    listen_options lo;
    lo.backlog = st_->sh.cfg.backlog;
    st_->listener = tcp_listener::bind(st_->sh.cfg.host, st_->sh.cfg.port, lo);
    st_->bound = st_->listener.local_address();
    if (const auto d = st_->sh.cfg.defer_accept; d.count() > 0) {
        const int secs = static_cast<int>(std::min<std::chrono::seconds::rep>(d.count(), INT_MAX));
        if (::setsockopt(st_->listener.native_handle(), IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs,
                         sizeof secs) != 0)
            throw std::system_error(
                errno, std::generic_category(),
                "smarm::http::server: TCP_DEFER_ACCEPT on " + st_->bound.to_string());
    }
    {
        std::lock_guard g(st_->mu);
        st_->listener_open = true;
    }
    supervisor_options so;
    so.max_children = st_->sh.cfg.max_connections;
    so.max_restarts = 0;
    st_->sup = start_supervisor(so, {});
    st_->started = true;
    auto st = st_;
    auto h = spawn([st] { listen_loop(st); });
    st_->listener_pid = h.id();
    h.detach();
    auto r = spawn([st] { reap_loop(st); });
    st_->reaper_pid = r.id();
    r.detach();
}

socket_address server::local_address() const {
    return st_->bound;
}

void server::stop(std::optional<std::chrono::nanoseconds> drain) {
    stop_state(st_, drain);
}

void server::stop_state(const std::shared_ptr<state>& sp,
                        std::optional<std::chrono::nanoseconds> drain) {
    if (!sp->started) return;
    const bool first = !sp->stopping.exchange(true);
    const auto budget = std::max(drain.value_or(sp->sh.cfg.drain_timeout),
                                 std::chrono::nanoseconds::zero());
    // Idle keep-alive connections are lame ducks for the grace (see the
    // header comment); a second graceful stop skips it.
    const auto grace = first ? std::min(sp->sh.cfg.drain_grace, budget)
                             : std::chrono::nanoseconds::zero();
    if (first) {
        // Refuse new connections now, not when the listener actor next
        // runs: a shut-down listening socket leaves LISTEN at once (connects
        // are refused) and its parked accept fails, ending the actor.
        {
            std::lock_guard g(sp->mu);
            if (sp->listener_open) ::shutdown(sp->listener.native_handle(), SHUT_RDWR);
        }
        request_stop(sp->listener_pid);
        request_stop(sp->reaper_pid);  // the drain has its own idle limit
        // drain_until before draining: a connection that sees draining
        // (seq_cst load) sees the end of the grace (connection.hpp).
        sp->sh.drain_until.store((detail::deadline_in(grace)).time_since_epoch().count(),
                                  std::memory_order_relaxed);
        sp->sh.draining.store(true, std::memory_order_seq_cst);
    }
    if (budget == std::chrono::nanoseconds::zero())
        sp->stop_connections(false);  // everything, now
    else if (grace == std::chrono::nanoseconds::zero())
        sp->stop_connections(true);  // idle ones now; busy ones finish
    if (!first && budget > std::chrono::nanoseconds::zero()) return;
    spawn([st = sp, budget, grace] {
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        auto drained = [&] { return st->sh.active.load(std::memory_order_relaxed) == 0; };
        if (grace > std::chrono::nanoseconds::zero()) {
            while (!drained() && clock::now() < start + grace)
                smarm::sleep(std::chrono::milliseconds(5));
            // Idle since before the drain and silent through the grace.
            st->stop_connections(true);
        }
        while (!drained() && clock::now() < start + budget)
            smarm::sleep(std::chrono::milliseconds(5));
        // Stopping the supervisor stops any connection still running.
        request_stop(st->sup.id);
        if (st->signal_pid.valid()) request_stop(st->signal_pid);
    }).detach();
}

void server::wait() {
    if (!st_->started) return;
    auto m = monitor(st_->sup.id);
    (void)m.rx.recv();
    // The listener closes its socket when stopped; make sure it has.
    auto ml = monitor(st_->listener_pid);
    (void)ml.rx.recv();
    st_->listener.close();
    if (st_->sh.access) st_->sh.access->flush();
}

void server::stop_on_signals() {
    if (!st_->started) throw std::logic_error("smarm::http::server::stop_on_signals: not started");
    if (st_->signal_pid.valid()) return;
    auto lease = std::make_shared<signal_lease>();
    auto st = st_;
    // Signals before this call are not this server's.
    const int before = g_signal_count.load(std::memory_order_relaxed);
    auto h = spawn([st, lease, before] {
        int handled = 0;  // signals since `before` acted on
        for (;;) {
            (void)wait_readable(lease->fd());
            char b[16];
            while (::read(lease->fd(), b, sizeof b) > 0) {
            }
            const int n = g_signal_count.load(std::memory_order_relaxed) - before;
            if (n > handled) {
                spdlog::info("http: {} received, {}", n == 1 ? "shutdown signal" : "second signal",
                             n == 1 ? "draining" : "stopping now");
                stop_state(st, n == 1 ? std::nullopt
                                      : std::optional<std::chrono::nanoseconds>(
                                            std::chrono::nanoseconds::zero()));
                handled = n;
                if (n >= 2) return;
            }
        }
    });
    st_->signal_pid = h.id();
    h.detach();
}

server_stats server::stats() const noexcept {
    auto& s = st_->sh;
    return {s.accepted.load(), s.rejected.load(), s.active.load(), s.requests.load(),
            s.errors.load(), s.accept_errors.load()};
}

bool server::draining() const noexcept {
    return st_->stopping.load(std::memory_order_relaxed);
}

const server_config& server::config() const noexcept {
    return st_->sh.cfg;
}

}  // namespace smarm::http
