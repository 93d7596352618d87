// The listener actor: accepts connections (backing off while accept
// fails), refuses them past max_connections with a 503, and starts each
// one as a temporary child of the connection supervisor whose body is the
// connection loop (plain or TLS).

#include <smarm/http/server.hpp>
#include <smarm/supervisor.hpp>
#include <smarm/timer.hpp>

#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <system_error>

#include "connection.hpp"
#include "server_state.hpp"
#include "stream.hpp"
#include "tls.hpp"

namespace smarm::http::internal {

namespace {

/// Refuses a connection past the cap: a short 503 written without waiting
/// (the listener must not stall on a slow peer), then close.
void reject(tcp_stream& conn, const server_config& cfg) {
    std::string out;
    append_simple(out, cfg, status::service_unavailable, false, 11);
    (void)::send(conn.native_handle(), out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    conn.close();
}

void run_connection(const std::shared_ptr<server::state>& st, std::uint64_t id, tcp_stream& conn) {
    conn_watch watch;
    st->conns.add(self_pid(), watch);
    // Counted here, not by the listener after it asks for the child: the
    // connection may be served and its client gone before the listener
    // runs again (stats() lagged a served connection under ASan).
    st->sh.accepted.fetch_add(1, std::memory_order_relaxed);
    st->sh.active.fetch_add(1, std::memory_order_relaxed);
    struct leave {
        server::state& st;
        conn_watch& watch;
        tcp_stream& conn;
        ~leave() {
            conn.close();
            st.conns.remove(watch);
            st.sh.active.fetch_sub(1, std::memory_order_relaxed);
            st.admitted.fetch_sub(1, std::memory_order_relaxed);
        }
    } guard{*st, watch, conn};
    conn_ctx c{st->sh, id, conn.peer_address(), &watch, st};
    actor_stream s(conn);
    if (st->tls) {
        tls_stream ts(s, *st->tls);
        if (!ts.handshake(std::chrono::steady_clock::now() + st->sh.cfg.header_timeout)) return;
        if (ts.alpn() == "h2") {
            serve_h2(ts, c, {});
            return;
        }
        serve_connection(ts, c);
        return;
    }
    serve_connection(s, c);
}

}  // namespace

void listen_loop(const std::shared_ptr<server::state>& st) {
    // Stopped (server::stop) while parked in accept: close the socket at
    // once so new connections are refused rather than left in the backlog.
    struct closer {
        server::state& st;
        ~closer() {
            std::lock_guard g(st.listener_mu);  // stop() may be shutting the socket down
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
        if (st->admitted.load(std::memory_order_relaxed) >= st->sh.cfg.max_connections) {
            st->sh.rejected.fetch_add(1, std::memory_order_relaxed);
            reject(conn, st->sh.cfg);
            continue;
        }
        st->admitted.fetch_add(1, std::memory_order_relaxed);
        const std::uint64_t id = st->next_conn.fetch_add(1, std::memory_order_relaxed);
        auto shared_conn = std::make_shared<tcp_stream>(std::move(conn));
        child_spec spec{"conn-" + std::to_string(id),
                        [st, id, shared_conn] { run_connection(st, id, *shared_conn); },
                        restart_policy::temporary};
        // No round trip per connection (it was ~4.6k of the 18.4k
        // instructions a Connection: close request cost): the cap is the
        // admission count above, so the supervisor never refuses one.
        if (!start_child_async(st->sup, std::move(spec))) {
            st->admitted.fetch_sub(1, std::memory_order_relaxed);
            st->sh.rejected.fetch_add(1, std::memory_order_relaxed);
            reject(*shared_conn, st->sh.cfg);
        }
    }
}

}  // namespace smarm::http::internal
