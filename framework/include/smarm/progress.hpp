#pragma once
// Progress points: named, always-on event counters.
//
//     void handle(request& r) { ...; SMARM_PROGRESS("requests_done"); }
//
// A hit is one relaxed atomic increment on a counter created once per call
// site (a function-local static). snapshot() sums points by name. Metrics
// export them; the causal profiler uses them as its throughput measure.
//
// Thread safety: hit() from anywhere; snapshot() from anywhere.

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

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

  private:
    const char* name_;
    std::atomic<std::uint64_t> count_{0};
    progress_point* next_ = nullptr;  // immutable after registration
};

}  // namespace smarm

/// Counts one unit of progress at this call site under `name`.
#define SMARM_PROGRESS(name)                                  \
    do {                                                      \
        static ::smarm::progress_point smarm_progress_{name}; \
        smarm_progress_.hit();                                \
    } while (0)
