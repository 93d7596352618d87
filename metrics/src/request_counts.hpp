#pragma once
// The HTTP request families (smarm_http_requests_total and
// smarm_http_request_duration_seconds), counted per OS thread and merged
// at scrape time.
//
// Why not prometheus-cpp's Counter and Histogram: every request did a
// compare-and-swap on doubles shared by every scheduler, under a mutex
// shared by every scheduler (to find the label set's handles), so two
// schedulers serving requests bounced those cache lines between the
// cores: smarm-server without the observer used 6% less CPU per request
// (ab_http ka_t2_c256, issue 23).
//
// Invariants (smarm/detail/thread_shards.hpp has the per-thread ones):
// - A shard's counts are written only by its thread (detail::bump). The
//   scraper may miss the requests being counted while it reads (the next
//   scrape has them), and the histogram's count, sum and buckets of one
//   route may be read at slightly different moments.
// - A shard's series and timings only grow (std::deque: an element never
//   moves). Only the owner adds, under the shard's `grow` lock; the owner
//   finds without the lock (it is the only writer of the containers), the
//   scraper reads the containers under the lock. Names are written before
//   an element is added and never after. observe() never parks, so the
//   shard it took is used on its thread.

#include <smarm/http/config.hpp>

#include <smarm/detail/thread_shards.hpp>

#include <prometheus/metric_family.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace smarm::metrics::internal {

class request_counts {
  public:
    request_counts();
    request_counts(const request_counts&) = delete;
    request_counts& operator=(const request_counts&) = delete;
    ~request_counts();

    /// Counts one answered request (any thread; never parks).
    void observe(const http::request_record& r);
    /// Appends the two families, summed over every shard.
    void collect(std::vector<prometheus::MetricFamily>& out) const;

    /// The duration buckets' upper bounds, seconds (then +Inf).
    static constexpr std::array<double, 16> bounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                   0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                   1,      2.5,     5,      10};

  private:
    struct shard;
    smarm::detail::thread_shards<shard> shards_;
};

}  // namespace smarm::metrics::internal
