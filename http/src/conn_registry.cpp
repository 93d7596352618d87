// The connection registry and the reaper: see conn_registry.hpp.

#include "conn_registry.hpp"

#include <smarm/runtime.hpp>
#include <smarm/timer.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <mutex>
#include <vector>

#include "connection.hpp"
#include "stream.hpp"

namespace smarm::http::internal {

void conn_registry::add(pid p, conn_watch& w) {
    w.owner = p;
    std::lock_guard g(mu_);
    w.prev = nullptr;
    w.next = head_;
    if (head_ != nullptr) head_->prev = &w;
    head_ = &w;
}

void conn_registry::remove(conn_watch& w) {
    std::lock_guard g(mu_);
    (w.prev != nullptr ? w.prev->next : head_) = w.next;
    if (w.next != nullptr) w.next->prev = w.prev;
    w.prev = w.next = nullptr;
}

template <class F>
void conn_registry::each(F&& f) {
    for (conn_watch* w = head_; w != nullptr; w = w->next)
        f(*w);
}

template <class Pick>
void conn_registry::stop_where(Pick pick) {
    std::vector<pid> targets;
    {
        std::lock_guard g(mu_);
        each([&](conn_watch& w) {
            if (pick(w)) targets.push_back(w.owner);
        });
    }
    for (pid p : targets)
        smarm::request_stop(p);
}

void conn_registry::stop_connections(bool idle_only) {
    stop_where([idle_only](const conn_watch& w) {
        return !idle_only || w.idle.load(std::memory_order_seq_cst);
    });
}

// Posted under mu_: a watch outlives its entry (the connection removes the
// entry before its watch goes), so it is alive while mu_ is held.
void conn_registry::notify_websockets() {
    std::lock_guard g(mu_);
    each([](conn_watch& w) {
        w.ws.post(ws_notice_slot::drain);  // not a WebSocket: not open, a no-op
    });
}

// One walk for both: the idle HTTP connections to stop, the WebSockets to
// tick (posted under mu_, as above).
void conn_registry::reap_idle(std::int64_t now) {
    std::vector<pid> targets;
    {
        std::lock_guard g(mu_);
        each([&](conn_watch& w) {
            if (w.idle.load(std::memory_order_seq_cst) &&
                w.reap_at.load(std::memory_order_relaxed) <= now) {
                targets.push_back(w.owner);
                return;
            }
            // One tick per due time: the session stores the next one.
            if (w.ws.due.load(std::memory_order_relaxed) <= now &&
                w.ws.due.exchange(std::numeric_limits<std::int64_t>::max(),
                                  std::memory_order_relaxed) <= now)
                w.ws.post(ws_notice_slot::tick);
        });
    }
    for (pid p : targets)
        smarm::request_stop(p);
}

void reap_loop(conn_registry& conns, const server_config& cfg) {
    using namespace std::chrono;
    nanoseconds shortest = std::min(cfg.header_timeout, cfg.idle_timeout);
    for (nanoseconds ws : {cfg.websocket.ping_interval, cfg.websocket.idle_timeout})
        if (ws.count() > 0) shortest = std::min(shortest, ws);
    const nanoseconds period = std::clamp<nanoseconds>(shortest / 8, milliseconds(5), seconds(1));
    for (;;) {
        smarm::sleep(period);
        try {
            const std::int64_t now = coarse_now().time_since_epoch().count();
            conns.reap_idle(now);
        } catch (const smarm::stopped&) {
            throw;
        } catch (const std::exception& e) {  // out of memory: idle limits must outlive it
            spdlog::error("http: reaping idle connections failed: {}", e.what());
        }
    }
}

}  // namespace smarm::http::internal
