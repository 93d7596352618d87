// The server's lifecycle: start (bind, the connection supervisor, the
// listener and reaper actors), the graceful stop and its drainer, wait,
// signals (through smarm::signal_set), stats.
//
// Actors: the listener (listener.cpp: accepts; spawns each connection
// through the supervisor), the connection supervisor (temporary children,
// capped at max_connections), one actor per connection, the reaper
// (conn_registry.cpp), and, during a stop, a drainer that waits for
// connections to end and stops stragglers at the deadline. `wait()`
// monitors the supervisor, which ends last.

#include <smarm/http/server.hpp>
#include <smarm/monitor.hpp>
#include <smarm/signal.hpp>
#include <smarm/supervisor.hpp>
#include <smarm/timer.hpp>

#include <spdlog/spdlog.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <initializer_list>
#include <mutex>
#include <system_error>

#include "access_log.hpp"
#include "server_state.hpp"
#include "stream.hpp"
#include "tls.hpp"

namespace smarm::http {

server::server(server_config cfg, router r)
    : st_(std::make_shared<state>(std::move(cfg), std::move(r))) {}

// The signal watcher (if any) ends with the drain and lets its signal set go.
server::~server() = default;

void server::start() {
    if (st_->started) throw std::logic_error("smarm::http::server::start: already started");
    if (st_->sh.cfg.tls)
        st_->tls = internal::make_tls_context(*st_->sh.cfg.tls, st_->sh.cfg.http2.enabled);
    if (st_->sh.cfg.access_log) st_->sh.access = internal::open_access_log(st_->sh.cfg);
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
        std::lock_guard g(st_->listener_mu);
        st_->listener_open = true;
    }
    supervisor_options so;
    // Unbounded here: the listener admits at most max_connections
    // (server::state::admitted) and starts them without waiting.
    so.max_children = 0;
    so.max_restarts = 0;
    st_->sup = start_supervisor(so, {});
    st_->started = true;
    auto st = st_;
    auto h = spawn([st] { internal::listen_loop(st); });
    st_->listener_pid = h.id();
    h.detach();
    auto r = spawn([st] { internal::reap_loop(st->conns, st->sh.cfg); });
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
    const auto budget =
        std::max(drain.value_or(sp->sh.cfg.drain_timeout), std::chrono::nanoseconds::zero());
    // Idle keep-alive connections are lame ducks for the grace (see the
    // header comment); a second graceful stop skips it.
    const auto grace =
        first ? std::min(sp->sh.cfg.drain_grace, budget) : std::chrono::nanoseconds::zero();
    if (first) {
        // Refuse new connections now, not when the listener actor next
        // runs: a shut-down listening socket leaves LISTEN at once (connects
        // are refused) and its parked accept fails, ending the actor.
        {
            std::lock_guard g(sp->listener_mu);
            if (sp->listener_open) ::shutdown(sp->listener.native_handle(), SHUT_RDWR);
        }
        request_stop(sp->listener_pid);
        request_stop(sp->reaper_pid);  // the drain has its own idle limit
        // drain_until before draining: a connection that sees draining
        // (seq_cst load) sees the end of the grace (connection.hpp).
        sp->sh.drain_until.store(internal::deadline_in(grace).time_since_epoch().count(),
                                 std::memory_order_relaxed);
        sp->sh.draining.store(true, std::memory_order_seq_cst);
        // After draining (websocket_session.hpp: the drain notice).
        sp->conns.notify_websockets();
    }
    if (budget == std::chrono::nanoseconds::zero())
        sp->conns.stop_connections(false);  // everything, now
    else if (grace == std::chrono::nanoseconds::zero())
        sp->conns.stop_connections(true);  // idle ones now; busy ones finish
    if (!first && budget > std::chrono::nanoseconds::zero()) return;
    spawn([st = sp, budget, grace] {
        using clock = std::chrono::steady_clock;
        const auto start = clock::now();
        auto drained = [&] { return st->sh.active.load(std::memory_order_relaxed) == 0; };
        if (grace > std::chrono::nanoseconds::zero()) {
            while (!drained() && clock::now() < start + grace)
                smarm::sleep(std::chrono::milliseconds(5));
            // Idle since before the drain and silent through the grace.
            st->conns.stop_connections(true);
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
    // Signals before this call are not this server's: the set catches from
    // its construction on, and holds the handlers until the watcher ends
    // with the drain.
    auto sigs = std::make_shared<signal_set>(std::initializer_list<int>{SIGTERM, SIGINT});
    auto st = st_;
    auto h = spawn([st, sigs] {
        for (int n = 1; n <= 2; ++n) {
            (void)sigs->wait();
            spdlog::info("http: {} received, {}", n == 1 ? "shutdown signal" : "second signal",
                         n == 1 ? "draining" : "stopping now");
            stop_state(st, n == 1 ? std::nullopt
                                  : std::optional<std::chrono::nanoseconds>(
                                        std::chrono::nanoseconds::zero()));
        }
    });
    st_->signal_pid = h.id();
    h.detach();
}

server_stats server::stats() const noexcept {
    auto& s = st_->sh;
    return {s.accepted.load(), s.rejected.load(),      s.active.load(),    s.requests.load(),
            s.errors.load(),   s.accept_errors.load(), s.websockets.load()};
}

bool server::draining() const noexcept {
    return st_->stopping.load(std::memory_order_relaxed);
}

const server_config& server::config() const noexcept {
    return st_->sh.cfg;
}

}  // namespace smarm::http
