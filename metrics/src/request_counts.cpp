// The HTTP request families counted per thread (request_counts.hpp has the
// invariants).

#include "request_counts.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <string_view>
#include <tuple>

namespace smarm::metrics::internal {

namespace {

/// request_counts::bounds in nanoseconds.
const std::array<std::int64_t, request_counts::bounds.size()> bounds_ns = [] {
    std::array<std::int64_t, request_counts::bounds.size()> out{};
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<std::int64_t>(request_counts::bounds[i] * 1e9 + 0.5);
    return out;
}();

}  // namespace

struct request_counts::shard {
    struct series {  ///< one (route, method, status)
        std::string route, method;
        unsigned status = 0;
        std::atomic<std::uint64_t> count{0};
    };
    struct timing {  ///< one route's durations
        std::string route;
        /// Per bucket, not cumulative; the last is +Inf. Their sum is the
        /// count, so a scrape's count always equals its +Inf bucket.
        std::array<std::atomic<std::uint64_t>, bounds.size() + 1> buckets{};
        std::atomic<std::uint64_t> sum_ns{0};
    };

    mutable std::mutex grow;  ///< the owner adding, or the scraper reading the lists
    std::deque<series> all_series;
    std::deque<timing> timings;
    series* last_series = nullptr;  ///< owner only
    timing* last_timing = nullptr;  ///< owner only

    series& find(std::string_view route, std::string_view method, unsigned status) {
        auto same = [&](const series& x) {
            return x.status == status && x.route == route && x.method == method;
        };
        if (last_series != nullptr && same(*last_series)) return *last_series;
        for (series& x : all_series)
            if (same(x)) return *(last_series = &x);
        std::lock_guard g(grow);
        series& x = all_series.emplace_back();
        x.route = route;
        x.method = method;
        x.status = status;
        return *(last_series = &x);
    }
    timing& find(std::string_view route) {
        if (last_timing != nullptr && last_timing->route == route) return *last_timing;
        for (timing& x : timings)
            if (x.route == route) return *(last_timing = &x);
        std::lock_guard g(grow);
        timing& x = timings.emplace_back();
        x.route = route;
        return *(last_timing = &x);
    }
};

request_counts::request_counts() : shards_([] { return std::make_unique<shard>(); }) {}

request_counts::~request_counts() = default;

void request_counts::observe(const http::request_record& r) {
    using smarm::detail::bump;
    shard& s = shards_.mine();
    bump(s.find(r.route, r.method, r.status).count);
    shard::timing& t = s.find(r.route);
    const std::int64_t d = std::max<std::int64_t>(r.duration.count(), 0);
    std::size_t b = 0;
    while (b < bounds_ns.size() && d > bounds_ns[b])
        ++b;
    bump(t.buckets[b]);
    bump(t.sum_ns, static_cast<std::uint64_t>(d));
}

void request_counts::collect(std::vector<prometheus::MetricFamily>& out) const {
    using key = std::tuple<std::string, std::string, unsigned>;  // method, route, status
    std::map<key, std::uint64_t> counts;
    struct merged {
        std::array<std::uint64_t, bounds.size() + 1> buckets{};
        std::uint64_t sum_ns = 0;
    };
    std::map<std::string, merged> timings;
    shards_.each([&](const shard& s) {
        std::lock_guard lists(s.grow);
        for (const shard::series& x : s.all_series)
            counts[key{x.method, x.route, x.status}] += x.count.load(std::memory_order_relaxed);
        for (const shard::timing& x : s.timings) {
            merged& m = timings[x.route];
            for (std::size_t i = 0; i < m.buckets.size(); ++i)
                m.buckets[i] += x.buckets[i].load(std::memory_order_relaxed);
            m.sum_ns += x.sum_ns.load(std::memory_order_relaxed);
        }
    });
    prometheus::MetricFamily requests{"smarm_http_requests_total",
                                      "HTTP requests answered, by route pattern, method and status.",
                                      prometheus::MetricType::Counter, {}};
    for (const auto& [k, n] : counts) {
        prometheus::ClientMetric m;
        m.label = {{"method", std::get<0>(k)},
                   {"route", std::get<1>(k)},
                   {"status", std::to_string(std::get<2>(k))}};
        m.counter.value = static_cast<double>(n);
        requests.metric.push_back(std::move(m));
    }
    out.push_back(std::move(requests));
    prometheus::MetricFamily durations{
        "smarm_http_request_duration_seconds",
        "HTTP request duration, first request byte to response written.",
        prometheus::MetricType::Histogram, {}};
    for (const auto& [route, t] : timings) {
        prometheus::ClientMetric m;
        m.label = {{"route", route}};
        m.histogram.sample_sum = static_cast<double>(t.sum_ns) / 1e9;
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i < t.buckets.size(); ++i) {
            cumulative += t.buckets[i];
            m.histogram.bucket.push_back(
                {cumulative,
                 i < bounds.size() ? bounds[i] : std::numeric_limits<double>::infinity()});
        }
        m.histogram.sample_count = cumulative;
        durations.metric.push_back(std::move(m));
    }
    out.push_back(std::move(durations));
}

}  // namespace smarm::metrics::internal
