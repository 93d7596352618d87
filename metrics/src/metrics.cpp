#include <smarm/metrics/metrics.hpp>

#include <smarm/causal.hpp>
#include <smarm/introspect.hpp>
#include <smarm/progress.hpp>
#include <smarm/supervisor.hpp>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "request_counts.hpp"

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

namespace smarm::metrics {

namespace {

prometheus::MetricFamily family(std::string name, std::string help, prometheus::MetricType t) {
    prometheus::MetricFamily f;
    f.name = std::move(name);
    f.help = std::move(help);
    f.type = t;
    return f;
}

void sample(prometheus::MetricFamily& f, double v, prometheus::ClientMetric::Label label = {}) {
    prometheus::ClientMetric m;
    if (!label.name.empty()) m.label.push_back(std::move(label));
    if (f.type == prometheus::MetricType::Counter)
        m.counter.value = v;
    else
        m.gauge.value = v;
    f.metric.push_back(std::move(m));
}

}  // namespace

process_figures read_process() {
    process_figures p;
    {
        std::ifstream statm("/proc/self/statm");
        long pages = 0, resident = 0;
        if (statm >> pages >> resident)
            p.rss_bytes =
                static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
    }
    {
        std::ifstream stat("/proc/self/stat");
        std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        auto close = all.rfind(')');
        if (close != std::string::npos) {
            std::istringstream rest(all.substr(close + 2));
            std::string field;
            double utime = 0, stime = 0;
            for (int i = 0; i < 13 && rest >> field; ++i) {
                if (i == 11) utime = std::stod(field);
                if (i == 12) stime = std::stod(field);
            }
            p.cpu_seconds = (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
        }
    }
    if (DIR* d = opendir("/proc/self/fd")) {
        int n = 0;
        while (readdir(d) != nullptr)
            ++n;
        closedir(d);
        p.open_fds = n - 3;  // ".", ".." and the directory's own descriptor
    }
    return p;
}

namespace {

/// Reads the runtime, the process and the attached server at scrape time.
class scrape_time_collector : public prometheus::Collectable {
  public:
    // Guarded by `mu` (not an atomic pointer): detach() must not return
    // while a scrape still reads the server it detaches.
    mutable std::mutex mu;
    const http::server* server = nullptr;
    std::function<db_pool_figures()> db;  // guarded by mu

    std::optional<http::server_stats> connections() const {
        std::lock_guard g(mu);
        if (server == nullptr) return std::nullopt;
        return server->stats();
    }

    std::vector<prometheus::MetricFamily> Collect() const override {
        using prometheus::MetricType;
        std::vector<prometheus::MetricFamily> out;
        auto snap = introspect::take_snapshot();

        auto actors = family("smarm_actors", "Live actors by state.", MetricType::Gauge);
        std::map<std::string, double> by_state{
            {"queued", 0}, {"running", 0}, {"running_notified", 0}, {"parked", 0}, {"done", 0}};
        for (auto& a : snap.actors)
            by_state[a.state] += 1;
        for (auto& [state, n] : by_state)
            sample(actors, n, {"state", state});
        out.push_back(std::move(actors));

        auto mailbox = family("smarm_mailbox_depth",
                              "Messages waiting in the registered inbox of each named actor.",
                              MetricType::Gauge);
        for (auto& a : snap.actors)
            if (a.mailbox_depth)
                for (auto& n : a.names)
                    sample(mailbox, static_cast<double>(*a.mailbox_depth), {"name", n});
        out.push_back(std::move(mailbox));

        std::uint64_t parks = 0, wakes = 0, overruns = 0;
        for (auto& s : snap.stats.schedulers) {
            parks += s.parks;
            wakes += s.wakes;
            overruns += s.overruns;
        }
        auto counter = [&](const char* name, const char* help, double v) {
            auto f = family(name, help, MetricType::Counter);
            sample(f, v);
            out.push_back(std::move(f));
        };
        auto gauge = [&](const char* name, const char* help, double v) {
            auto f = family(name, help, MetricType::Gauge);
            sample(f, v);
            out.push_back(std::move(f));
        };
        // Utilisation per scheduler: rate() of each state's seconds is the
        // share of that scheduler's time in it.
        auto util = family("smarm_scheduler_seconds_total",
                           "Seconds each scheduler thread spent busy (running actors and the "
                           "loop), spinning idle, or parked.",
                           MetricType::Counter);
        for (std::size_t i = 0; i < snap.stats.schedulers.size(); ++i) {
            const auto& k = snap.stats.schedulers[i];
            const std::string id = std::to_string(i);
            for (auto [state, ns] :
                 {std::pair{"busy", k.busy_ns}, std::pair{"spinning", k.spinning_ns},
                  std::pair{"parked", k.parked_ns}}) {
                prometheus::ClientMetric m;
                m.label = {{"scheduler", id}, {"state", state}};
                m.counter.value = static_cast<double>(ns) / 1e9;
                util.metric.push_back(std::move(m));
            }
        }
        out.push_back(std::move(util));
        counter("smarm_actor_spawns_total", "Actors spawned.",
                static_cast<double>(snap.stats.spawns));
        counter("smarm_scheduler_parks_total", "Times a scheduler thread parked idle.",
                static_cast<double>(parks));
        counter("smarm_scheduler_wakes_total", "Times a scheduler thread returned from a park.",
                static_cast<double>(wakes));
        counter("smarm_timeslice_overruns_total", "Actors that ran past twice their timeslice.",
                static_cast<double>(overruns));
        gauge("smarm_run_queue_length", "Actors waiting in the shared run queue.",
              static_cast<double>(snap.stats.run_queue_len));
        gauge("smarm_timers_pending", "Timers armed and not yet fired.",
              static_cast<double>(snap.stats.timers_pending));
        auto sup = supervisor_totals();
        counter("smarm_supervisor_restarts_total", "Children restarted by supervisors.",
                static_cast<double>(sup.restarts));
        counter("smarm_supervisor_give_ups_total",
                "Supervisors that exceeded their restart intensity.",
                static_cast<double>(sup.give_ups));
        auto progress =
            family("smarm_progress_total", "Progress point hits, by point.", MetricType::Counter);
        for (auto& [name, n] : progress_point::snapshot())
            sample(progress, static_cast<double>(n), {"name", name});
        out.push_back(std::move(progress));
        gauge("smarm_causal_experiment_running",
              "1 while a causal profiler experiment runs (POST /debug/causal), else 0.",
              causal::running() ? 1.0 : 0.0);
        counter("smarm_causal_injected_seconds_total",
                "Delay the causal profiler has injected into other actors, in seconds.",
                causal::ticks_to_ns(causal::totals().injected) / 1e9);

        auto proc = read_process();
        gauge("process_resident_memory_bytes", "Resident memory size in bytes.", proc.rss_bytes);
        counter("process_cpu_seconds_total", "User and system CPU time spent in seconds.",
                proc.cpu_seconds);
        gauge("process_open_fds", "Open file descriptors.", proc.open_fds);

        std::function<db_pool_figures()> db_source;
        {
            std::lock_guard g(mu);
            db_source = db;
        }
        if (db_source) {
            const db_pool_figures d = db_source();
            auto conns = family("smarm_db_pool_connections",
                                "Database pool connections: open, in use, checkouts waiting, and "
                                "the pool's size.",
                                MetricType::Gauge);
            sample(conns, static_cast<double>(d.open), {"state", "open"});
            sample(conns, static_cast<double>(d.in_use), {"state", "in_use"});
            sample(conns, static_cast<double>(d.waiting), {"state", "waiting"});
            sample(conns, static_cast<double>(d.size), {"state", "size"});
            out.push_back(std::move(conns));
            gauge("smarm_db_pool_healthy", "1 while the last connect to the database worked.",
                  d.healthy ? 1.0 : 0.0);
            counter("smarm_db_pool_checkouts_total", "Connections checked out of the pool.",
                    static_cast<double>(d.checkouts));
            counter("smarm_db_pool_waits_total", "Checkouts that had to wait for a connection.",
                    static_cast<double>(d.waited));
            counter("smarm_db_pool_timeouts_total",
                    "Checkouts that got no connection (deadline passed or database down).",
                    static_cast<double>(d.timeouts));
            counter("smarm_db_pool_connect_failures_total", "Failed connects to the database.",
                    static_cast<double>(d.connect_failures));
            counter("smarm_db_pool_discarded_total",
                    "Connections closed as broken or returned inside a transaction.",
                    static_cast<double>(d.discarded));
        }

        if (auto stats = connections()) {
            auto& st = *stats;
            gauge("smarm_http_connections_active", "HTTP connections open now.",
                  static_cast<double>(st.active));
            gauge("smarm_http_websockets_active",
                  "WebSocket connections open now (upgraded; counted in "
                  "smarm_http_connections_active too).",
                  static_cast<double>(st.websockets));
            counter("smarm_http_connections_accepted_total", "HTTP connections accepted.",
                    static_cast<double>(st.accepted));
            counter("smarm_http_connections_rejected_total",
                    "HTTP connections refused past max_connections.",
                    static_cast<double>(st.rejected));
            counter("smarm_http_accept_errors_total",
                    "Failed accepts on the HTTP listener (EMFILE, ENFILE, ...).",
                    static_cast<double>(st.accept_errors));
        }
        return out;
    }
};

}  // namespace

struct exporter::impl {
    std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
    std::shared_ptr<scrape_time_collector> runtime = std::make_shared<scrape_time_collector>();
    internal::request_counts requests;  ///< the HTTP request families, per thread
    prometheus::Histogram* db_checkout = nullptr;
    prometheus::Histogram* db_statement = nullptr;
    prometheus::Family<prometheus::Counter>* db_errors = nullptr;
    std::map<std::string, prometheus::Counter*, std::less<>> db_error_classes;  // guarded by mu

    std::mutex mu;  ///< guards db_error_classes

    /// Every family: the registry's and the scrape-time ones.
    std::string scrape() const {
        auto families = registry->Collect();
        requests.collect(families);
        auto more = runtime->Collect();
        families.insert(families.end(), std::make_move_iterator(more.begin()),
                        std::make_move_iterator(more.end()));
        std::ostringstream out;
        prometheus::TextSerializer().Serialize(out, families);
        return out.str();
    }
};

namespace {
const prometheus::Histogram::BucketBoundaries db_buckets{
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

exporter::exporter() : p_(std::make_shared<impl>()) {
    p_->db_checkout = &prometheus::BuildHistogram()
                           .Name("smarm_db_pool_checkout_duration_seconds")
                           .Help("Time a checkout waited for a database connection.")
                           .Register(*p_->registry)
                           .Add({}, db_buckets);
    p_->db_statement = &prometheus::BuildHistogram()
                            .Name("smarm_db_query_duration_seconds")
                            .Help("Database statement duration, sent to result (or error).")
                            .Register(*p_->registry)
                            .Add({}, db_buckets);
    p_->db_errors = &prometheus::BuildCounter()
                         .Name("smarm_db_query_errors_total")
                         .Help(
                             "Database statements that failed, by SQLSTATE class (its first "
                             "two characters).")
                         .Register(*p_->registry);
}

exporter::~exporter() = default;

std::function<void(const http::request_record&)> exporter::request_observer() {
    auto p = p_;
    return [p](const http::request_record& r) { p->requests.observe(r); };
}

void exporter::attach(const http::server& srv) {
    std::lock_guard g(p_->runtime->mu);
    p_->runtime->server = &srv;
}

void exporter::detach() noexcept {
    std::lock_guard g(p_->runtime->mu);
    p_->runtime->server = nullptr;
}

std::optional<http::server_stats> exporter::connections() const {
    return p_->runtime->connections();
}

void exporter::attach_db_pool(std::function<db_pool_figures()> source) {
    std::lock_guard g(p_->runtime->mu);
    p_->runtime->db = std::move(source);
}

void exporter::detach_db_pool() noexcept {
    std::lock_guard g(p_->runtime->mu);
    p_->runtime->db = nullptr;
}

std::function<void(std::chrono::nanoseconds)> exporter::db_checkout_observer() {
    auto p = p_;
    return [p](std::chrono::nanoseconds waited) {
        p->db_checkout->Observe(std::chrono::duration<double>(waited).count());
    };
}

std::function<void(std::chrono::nanoseconds, std::string_view)> exporter::db_statement_observer() {
    auto p = p_;
    return [p](std::chrono::nanoseconds d, std::string_view sqlstate) {
        p->db_statement->Observe(std::chrono::duration<double>(d).count());
        if (sqlstate.empty()) return;
        // Classes are two characters of [0-9A-Z]: a bounded label.
        std::string cls(sqlstate.substr(0, 2));
        for (char& c : cls)
            if (!std::isalnum(static_cast<unsigned char>(c))) c = '?';
        prometheus::Counter* c;
        {
            std::lock_guard g(p->mu);
            auto it = p->db_error_classes.find(cls);
            if (it == p->db_error_classes.end())
                it = p->db_error_classes.emplace(cls, &p->db_errors->Add({{"class", cls}})).first;
            c = it->second;
        }
        c->Increment();
    };
}

std::string exporter::scrape() const {
    return p_->scrape();
}

void exporter::add_route(http::router& r, std::string path) {
    auto p = p_;
    r.get(path, [p](http::request&) {
        return http::response(http::status::ok, p->scrape(), "text/plain; version=0.0.4");
    });
}

}  // namespace smarm::metrics
