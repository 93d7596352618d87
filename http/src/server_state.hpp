#pragma once
// What one server's actors share (server::state): the connections' shared
// block, the listening socket, the connection registry, the actors' pids
// and the lifecycle flags. The listener (listener.cpp), the registry and
// its reaper (conn_registry.cpp) and the lifecycle (server.cpp) each own
// their part.

#include <smarm/http/server.hpp>
#include <smarm/net.hpp>
#include <smarm/pid.hpp>
#include <smarm/supervisor.hpp>

#include <smarm/detail/spinlock.hpp>

#include <boost/asio/ssl/context.hpp>

#include <atomic>
#include <cstdint>
#include <memory>

#include "conn_registry.hpp"
#include "connection.hpp"

namespace smarm::http {

struct server::state {
    state(server_config c, router r) : sh(std::move(c), std::move(r)) {}

    internal::shared sh;
    std::unique_ptr<boost::asio::ssl::context> tls;  // set when cfg.tls is
    tcp_listener listener;
    socket_address bound;
    supervisor_ref sup;
    pid listener_pid;
    pid reaper_pid;
    pid signal_pid;
    bool started = false;
    std::atomic<bool> stopping{false};
    internal::conn_registry conns;
    std::atomic<std::uint64_t> next_conn{1};
    // Connections admitted by the listener and not yet ended (their actor
    // may not have started): the max_connections cap. Only the listener
    // adds (after reading it below the cap), a connection's end subtracts;
    // relaxed: a stale read can only see more than there are (the
    // listener's own adds are in its program order), so it may refuse one
    // early, never admit one past the cap.
    std::atomic<std::uint64_t> admitted{0};
    // stop() shuts the socket down while the listener may be closing it.
    smarm::detail::spinlock listener_mu;
    bool listener_open = false;  // guarded by listener_mu
};

namespace internal {
/// The listener actor's body: accepts, with backoff on failures, and
/// starts each connection under the connection supervisor (listener.cpp).
void listen_loop(const std::shared_ptr<server::state>& st);
}  // namespace internal

}  // namespace smarm::http
