#include <smarm/progress.hpp>

#include <memory>
#include <mutex>
#include <utility>

namespace smarm {

namespace {
// Lock-free intrusive lists: points are only ever added (statics), so a
// reader walking from the head sees a consistent prefix.
std::atomic<progress_point*> g_head{nullptr};
std::atomic<latency_point*> g_latency_head{nullptr};

/// Pushes `p` (its fields set) onto `head`.
template <class Point>
void publish(std::atomic<Point*>& head, Point* p, Point*& next) noexcept {
    Point* h = head.load(std::memory_order_relaxed);
    do {
        next = h;
        // release: publishes the point's fields and `next` to snapshot() readers.
    } while (
        !head.compare_exchange_weak(h, p, std::memory_order_release, std::memory_order_relaxed));
}
}  // namespace

progress_point::progress_point(const char* name) noexcept : name_(name) {
    publish(g_head, this, next_);
}

namespace {
/// Points made at run time, by name; never erased, so references and the
/// name strings (the map's keys, which the points point at) stay valid.
std::mutex g_named_mu;
std::map<std::pair<std::string, int>, std::unique_ptr<progress_point>, std::less<>> g_named;
std::map<std::pair<std::string, int>, std::unique_ptr<latency_point>, std::less<>> g_named_latency;

template <class Point, class Map, class... Extra>
Point& intern(Map& m, std::string_view name, int key, Extra... extra) {
    std::lock_guard lk(g_named_mu);
    auto [it, fresh] = m.try_emplace(std::pair<std::string, int>(name, key));
    if (fresh) it->second = std::make_unique<Point>(it->first.first.c_str(), extra...);
    return *it->second;
}
}  // namespace

progress_point& progress_point::named(std::string_view name) {
    return intern<progress_point>(g_named, name, 0);
}

std::map<std::string, std::uint64_t> progress_point::snapshot() {
    std::map<std::string, std::uint64_t> out;
    // acquire: pairs with the registration's release.
    for (progress_point* p = g_head.load(std::memory_order_acquire); p != nullptr; p = p->next_)
        out[p->name_] += p->count();
    return out;
}

namespace {
constexpr std::uint64_t tick_mask = (std::uint64_t{1} << latency_point::tick_bits) - 1;

// A 56-bit difference as a signed value.
std::int64_t signed56(std::uint64_t v) noexcept {
    v &= tick_mask;
    return static_cast<std::int64_t>(v << 8) >> 8;
}
}  // namespace

latency_point::latency_point(const char* name, edge e) noexcept : name_(name), edge_(e) {
    publish(g_latency_head, this, next_);
}

latency_point& latency_point::named(std::string_view name, edge e) {
    return intern<latency_point>(g_named_latency, name, static_cast<int>(e), e);
}

std::map<std::string, latency_point::totals> latency_point::snapshot() {
    std::map<std::string, totals> out;
    // acquire: pairs with the registration's release.
    for (latency_point* p = g_latency_head.load(std::memory_order_acquire); p != nullptr;
         p = p->next_) {
        totals& t = out[p->name_];
        std::uint64_t word = 0, n = 0;
        for (;;) {
            // acquire: the c hits counted have their ticks in `word` (hit()).
            const std::uint64_t c = p->count_.load(std::memory_order_acquire);
            // acquire: keeps the second count load after this one.
            word = p->stamps_.load(std::memory_order_acquire);
            const std::uint64_t c2 = p->count_.load(std::memory_order_relaxed);
            // `word` holds c + k hits, 0 <= k <= (c2 - c) + hits in progress:
            // below 256, the low 8 bits give k. Else the writers outran this
            // read (it was descheduled): read again.
            if (c2 - c < 128) {
                n = c + ((word - c) & 0xff);
                break;
            }
        }
        const std::uint64_t sum = ((word - n) >> 8) & tick_mask;
        if (p->edge_ == edge::begin) {
            t.arrivals += n;
            t.arrival_ticks = (t.arrival_ticks + sum) & tick_mask;
        } else {
            t.departures += n;
            t.departure_ticks = (t.departure_ticks + sum) & tick_mask;
        }
    }
    return out;
}

latency_point::window latency_point::between(const totals& b, const totals& a, std::uint64_t t0,
                                             std::uint64_t t1) noexcept {
    window w;
    w.arrivals = a.arrivals - b.arrivals;
    w.departures = a.departures - b.departures;
    w.in_flight_end = static_cast<std::int64_t>(a.arrivals - a.departures);
    // The integral of N(t) over [t0, t1]: the N(t0) in flight all window
    // long, plus each arrival from its tick to t1, minus each departure
    // from its tick to t1. Each term is exact mod 2^56 and small in truth.
    const std::uint64_t span = t1 - t0;
    const std::int64_t arrived = signed56(w.arrivals * t1 - (a.arrival_ticks - b.arrival_ticks));
    const std::int64_t departed =
        signed56(w.departures * t1 - (a.departure_ticks - b.departure_ticks));
    const auto n0 = static_cast<std::int64_t>(b.arrivals - b.departures);
    w.occupancy_ticks = static_cast<double>(n0) * static_cast<double>(span) +
                        static_cast<double>(arrived) - static_cast<double>(departed);
    if (w.occupancy_ticks < 0) w.occupancy_ticks = 0;  // edges read a moment apart
    return w;
}

}  // namespace smarm
