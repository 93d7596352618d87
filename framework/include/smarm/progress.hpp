#pragma once
// Progress points: named, always-on event counters.
//
//     void handle(request& r) { ...; SMARM_PROGRESS("requests_done"); }
//
// A hit is one relaxed atomic increment on a counter created once per call
// site (a function-local static). snapshot() sums points by name. Metrics
// export them; the causal profiler uses them as its throughput measure.
//
// Latency points: a pair of edges under one name, placed where a unit of
// work arrives and where it departs:
//
//     SMARM_LATENCY_BEGIN("order");  ...  SMARM_LATENCY_END("order");
//
// Each edge counts its hits and sums the tick at which they happened (two
// atomic increments and a TSC read). Over a window, Little's law gives the
// mean latency without matching a begin to its end: the time integral of
// the number in flight, divided by the arrivals (window::mean_ticks).
//
// A hit's count and tick land in two words, so a reader could see one
// without the other, and a missing tick is the whole uptime's worth of
// error. The tick word therefore carries its own count: each hit adds
// (tick << 8) + 1 to it first and bumps the count word second, so the low
// 8 bits say how many ticks the word holds mod 256. The reader loads the
// count (c), the tick word, then the count again (c2): the word holds at
// least c hits and at most c2 plus the hits in progress, so while c2 - c
// stays small (the reader retries otherwise) and fewer than 128 threads
// hit one point at once, the low bits pick the exact count. Tick sums are thus
// mod 2^56; a window's differences stay exact while hits x window length
// stays below 2^55 ticks (10^6 hits over a 10 s window at 3 GHz is 3e16 of
// 3.6e16: size windows below that).
//
// Thread safety: hit(), snapshot() and named() from anywhere.

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace smarm {

class progress_point {
  public:
    /// Registers the point under `name` (a string literal: not copied).
    explicit progress_point(const char* name) noexcept;
    progress_point(const progress_point&) = delete;
    progress_point& operator=(const progress_point&) = delete;

    // relaxed: a monotonic counter; readers need no ordering with other data.
    void hit() noexcept { count_.fetch_add(1, std::memory_order_relaxed); }
    std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
    const char* name() const noexcept { return name_; }

    /// Every point's count, summed by name.
    static std::map<std::string, std::uint64_t> snapshot();

    /// The point named `name` (copied), made on first use and never
    /// destroyed: for names known only at run time (an HTTP route's
    /// pattern). The same name gives the same point, so code rebuilt at run
    /// time (a router on a listener's restart) keeps counting into it; the
    /// names must come from a bounded set. Takes a lock: look it up once
    /// and keep the reference.
    static progress_point& named(std::string_view name);

  private:
    const char* name_;
    std::atomic<std::uint64_t> count_{0};
    progress_point* next_ = nullptr;  // immutable after registration
};

namespace detail {
std::uint64_t ticks() noexcept;  // detail/wait.hpp
}

/// One edge of a latency point (see the top of this file).
class latency_point {
  public:
    enum class edge : bool { begin, end };
    /// Registers the edge under `name` (a string literal: not copied).
    latency_point(const char* name, edge e) noexcept;
    latency_point(const latency_point&) = delete;
    latency_point& operator=(const latency_point&) = delete;

    static constexpr unsigned tick_bits = 56;  ///< tick sums are mod 2^tick_bits

    void hit() noexcept {
        const std::uint64_t t = detail::ticks();
        // relaxed: ordered before the release below, which is what readers need.
        stamps_.fetch_add((t << 8) + 1, std::memory_order_relaxed);
        // release: a reader that sees this count (acquire) sees its tick.
        count_.fetch_add(1, std::memory_order_release);
    }

    /// Both edges of one name, summed over their call sites.
    struct totals {
        std::uint64_t arrivals = 0, departures = 0;
        std::uint64_t arrival_ticks = 0, departure_ticks = 0;  ///< sums of hit ticks, mod 2^56
        std::uint64_t in_flight() const noexcept { return arrivals - departures; }
    };
    /// Every latency point, by name.
    static std::map<std::string, totals> snapshot();

    /// The edge `e` of the point named `name` (copied), made on first use
    /// and never destroyed; as progress_point::named.
    static latency_point& named(std::string_view name, edge e);

    /// What a window between two snapshots says about one point.
    struct window {
        std::uint64_t arrivals = 0, departures = 0;
        std::int64_t in_flight_end = 0;  ///< arrivals - departures at the window's end
        double occupancy_ticks = 0;      ///< integral of the number in flight (hits x ticks)
        /// Mean latency in ticks by Little's law (0 without arrivals).
        double mean_ticks() const noexcept {
            return arrivals == 0 ? 0.0 : occupancy_ticks / static_cast<double>(arrivals);
        }
    };
    /// The window from `before` (read at tick t0) to `after` (read at t1);
    /// the snapshots must hold only hits at or before their tick.
    static window between(const totals& before, const totals& after, std::uint64_t t0,
                          std::uint64_t t1) noexcept;

  private:
    const char* name_;
    edge edge_;
    std::atomic<std::uint64_t> count_{0};
    std::atomic<std::uint64_t> stamps_{0};
    latency_point* next_ = nullptr;  // immutable after registration
};

}  // namespace smarm

/// Counts one unit of progress at this call site under `name`.
#define SMARM_PROGRESS(name)                                  \
    do {                                                      \
        static ::smarm::progress_point smarm_progress_{name}; \
        smarm_progress_.hit();                                \
    } while (0)

/// One unit of work for latency point `name` arrives here.
#define SMARM_LATENCY_BEGIN(name)                                                                \
    do {                                                                                         \
        static ::smarm::latency_point smarm_latency_{name, ::smarm::latency_point::edge::begin}; \
        smarm_latency_.hit();                                                                    \
    } while (0)
/// One unit of work for latency point `name` departs here.
#define SMARM_LATENCY_END(name)                                                                \
    do {                                                                                       \
        static ::smarm::latency_point smarm_latency_{name, ::smarm::latency_point::edge::end}; \
        smarm_latency_.hit();                                                                  \
    } while (0)
