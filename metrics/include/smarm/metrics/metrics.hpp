#pragma once
// smarm::metrics — Prometheus metrics for a smarm server (prometheus-cpp
// core: registry, families, text serializer; served by our own HTTP server).
//
//     smarm::metrics::exporter m;
//     cfg.on_request = m.request_observer();   // HTTP request families
//     m.attach(server);                         // connection families
//     m.add_route(router);                      // GET /metrics
//
// Families (HELP on each; units in the names; label values bounded: the
// route *pattern*, never the raw path; unmatched requests are route=""):
//   smarm_http_requests_total{route,method,status}
//   smarm_http_request_duration_seconds{route} (histogram)
//   smarm_http_connections_active, _accepted_total, _rejected_total,
//   smarm_http_accept_errors_total, smarm_http_websockets_active
//   smarm_actors{state}, smarm_actor_spawns_total, smarm_scheduler_parks_total,
//   smarm_scheduler_wakes_total, smarm_run_queue_length,
//   smarm_timeslice_overruns_total, smarm_timers_pending,
//   smarm_mailbox_depth{name} (named actors), smarm_supervisor_restarts_total,
//   smarm_supervisor_give_ups_total, smarm_progress_total{name},
//   smarm_causal_experiment_running, smarm_causal_injected_seconds_total,
//   process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds
//   With a database pool attached (attach_db_pool, the observers below):
//   smarm_db_pool_connections{state=open|in_use|waiting|size},
//   smarm_db_pool_healthy, smarm_db_pool_checkouts_total,
//   smarm_db_pool_waits_total, smarm_db_pool_timeouts_total,
//   smarm_db_pool_connect_failures_total, smarm_db_pool_discarded_total,
//   smarm_db_pool_checkout_duration_seconds (histogram),
//   smarm_db_query_duration_seconds (histogram),
//   smarm_db_query_errors_total{class} (the SQLSTATE's two-character class:
//   "23" integrity, "57" cancelled / operator intervention, "08" connection)
// Runtime and process families are read at scrape time (introspection and
// stats), so they cost nothing between scrapes.
//
// Thread safety: the observer and the route may run on any actor at once.

#include <smarm/http/router.hpp>
#include <smarm/http/server.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace smarm::metrics {

/// A database pool's counters, read at scrape time (attach_db_pool).
struct db_pool_figures {
    std::uint64_t size = 0, open = 0, in_use = 0, waiting = 0;
    std::uint64_t checkouts = 0, waited = 0, timeouts = 0, connect_failures = 0, discarded = 0;
    bool healthy = false;
};

/// This process's figures from /proc/self (zeros where it cannot be read).
struct process_figures {
    double rss_bytes = 0, cpu_seconds = 0, open_fds = 0;
};
process_figures read_process();

class exporter {
  public:
    exporter();
    ~exporter();
    exporter(const exporter&) = delete;
    exporter& operator=(const exporter&) = delete;

    /// For http::server_config::on_request.
    std::function<void(const http::request_record&)> request_observer();
    /// Reports `srv`'s connection counters until detach() (call it before
    /// the server is destroyed; once it returns no scrape reads `srv`).
    /// Attaching a new server (a restarted listener) restarts the
    /// connection counters, which Prometheus reads as a counter reset.
    void attach(const http::server& srv);
    void detach() noexcept;
    /// The attached server's connection counters (nullopt when none is).
    std::optional<http::server_stats> connections() const;
    /// Reports a database pool through `source` (called at each scrape,
    /// from the scraping actor) until detach_db_pool().
    void attach_db_pool(std::function<db_pool_figures()> source);
    void detach_db_pool() noexcept;
    /// For postgres::pool_options::on_checkout: the time a checkout waited.
    std::function<void(std::chrono::nanoseconds)> db_checkout_observer();
    /// For postgres::options::on_statement: each statement's duration and
    /// SQLSTATE ("" = success).
    std::function<void(std::chrono::nanoseconds, std::string_view)> db_statement_observer();
    /// Adds GET /metrics (text exposition format 0.0.4).
    void add_route(http::router& r, std::string path = "/metrics");
    /// The current exposition text.
    std::string scrape() const;

  private:
    struct impl;
    std::shared_ptr<impl> p_;
};

}  // namespace smarm::metrics
