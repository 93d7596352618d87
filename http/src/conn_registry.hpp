#pragma once
// The connection registry (conn_registry.cpp): every live connection's pid
// and watch (connection.hpp), for the drainer (stop the idle ones, or all)
// and the reaper actor (stop the ones idle past their limit).
//
// The watches form an intrusive list (each lives in its connection's frame
// and is linked there from add() to remove()): a connection costs no
// allocation and no hashing here, two short lock holds.

#include <smarm/http/config.hpp>
#include <smarm/pid.hpp>

#include <smarm/detail/spinlock.hpp>

#include <cstdint>

namespace smarm::http::internal {

struct conn_watch;

class conn_registry {
  public:
    /// Links `watch` (which outlives its entry: remove() before it goes)
    /// for the connection actor `p`.
    void add(pid p, conn_watch& watch);
    void remove(conn_watch& watch);
    /// request_stop every connection (idle_only: those parked between
    /// requests).
    void stop_connections(bool idle_only);
    /// Sends the drain notice to every connection that became a WebSocket
    /// (conn_watch::ws).
    void notify_websockets();
    /// request_stop every connection idle past its reap_at, and tick every
    /// WebSocket whose ping or idle limit (`due`, websocket_session.hpp) is
    /// at or before `now` (steady_clock ns since its epoch), in one walk.
    void reap_idle(std::int64_t now);

  private:
    /// request_stop every connection whose watch satisfies `pick` (read
    /// under mu_; the stops are sent after it is released).
    template <class Pick>
    void stop_where(Pick pick);

    /// Calls f(watch) for every linked watch; mu_ held.
    template <class F>
    void each(F&& f);

    smarm::detail::spinlock mu_;
    conn_watch* head_ = nullptr;  // guarded by mu_ (with every watch's prev/next)
};

/// The reaper actor's body: stops connections idle past their limit and
/// ticks WebSockets past their ping or idle limit, waking every eighth of
/// the shortest of the header and idle timeouts and the WebSocket ping
/// interval and idle timeout (5 ms..1 s), so a limit is enforced never
/// early and at most that much late. Runs until stopped.
void reap_loop(conn_registry& conns, const server_config& cfg);

}  // namespace smarm::http::internal
