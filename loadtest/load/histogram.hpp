#pragma once
// An HDR-style latency histogram: log-linear buckets with a bounded relative
// error, constant-time recording, no allocation after construction.
//
// Values below 2^S (S = sub_bits) have a bucket each; above, every power of
// two [2^m, 2^(m+1)) is split into 2^S equal buckets, so a value is known to
// within 2^-S of itself (S = 7: 0.8%). Values past the top (2^max_bits) are
// clamped into the last bucket; the exact maximum is kept separately.
//
// Concurrency: one writer (the connection actor that owns it) and readers
// that merge it for the live progress line. Counters are relaxed atomics
// updated with load + store (no locked instruction: there is one writer); a
// reader sees each counter whole and possibly a request or two behind, which
// a progress line can afford. merge_into() into a plain histogram is exact
// once the writer has finished.

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <vector>

#include <smarm/detail/bump.hpp>

namespace smarm::load {

inline constexpr unsigned sub_bits = 7;
inline constexpr unsigned max_bits = 40;  // 2^40 ns ~ 18 minutes
inline constexpr std::size_t bucket_count = (max_bits - sub_bits + 1) << sub_bits;

/// The bucket of `v` (see the header comment).
constexpr std::size_t bucket_of(std::uint64_t v) noexcept {
    if (v >= (std::uint64_t{1} << max_bits)) v = (std::uint64_t{1} << max_bits) - 1;
    if (v < (std::uint64_t{1} << sub_bits)) return static_cast<std::size_t>(v);
    const unsigned msb = 63u - static_cast<unsigned>(std::countl_zero(v));
    const unsigned shift = msb - sub_bits;
    return (static_cast<std::size_t>(shift) + 1) * (std::size_t{1} << sub_bits) +
           static_cast<std::size_t>((v >> shift) - (std::uint64_t{1} << sub_bits));
}

/// The smallest value of bucket `i`.
constexpr std::uint64_t bucket_low(std::size_t i) noexcept {
    constexpr std::size_t half = std::size_t{1} << sub_bits;
    if (i < 2 * half) return i;
    const std::size_t shift = i / half - 1;
    return (static_cast<std::uint64_t>(i % half) + half) << shift;
}

/// The number of values bucket `i` stands for.
constexpr std::uint64_t bucket_width(std::size_t i) noexcept {
    constexpr std::size_t half = std::size_t{1} << sub_bits;
    return i < 2 * half ? 1 : std::uint64_t{1} << (i / half - 1);
}

/// A plain histogram: results, merging, percentiles.
class histogram {
  public:
    histogram() : counts_(bucket_count, 0) {}

    void record(std::uint64_t v, std::uint64_t n = 1) noexcept {
        counts_[bucket_of(v)] += n;
        total_ += n;
        max_ = std::max(max_, v);
        min_ = std::min(min_, v);
        sum_ += static_cast<double>(v) * static_cast<double>(n);
    }
    void add(const histogram& o) noexcept {
        for (std::size_t i = 0; i < bucket_count; ++i)
            counts_[i] += o.counts_[i];
        total_ += o.total_;
        max_ = std::max(max_, o.max_);
        min_ = std::min(min_, o.min_);
        sum_ += o.sum_;
    }
    std::uint64_t count() const noexcept { return total_; }
    std::uint64_t max() const noexcept { return total_ == 0 ? 0 : max_; }
    std::uint64_t min() const noexcept { return total_ == 0 ? 0 : min_; }
    double mean() const noexcept { return total_ == 0 ? 0 : sum_ / static_cast<double>(total_); }
    /// The value at percentile `p` (0..100): the middle of the bucket holding
    /// the round(p% * count)-th value, clamped to the exact minimum and
    /// maximum (the last value is the maximum itself).
    std::uint64_t percentile(double p) const noexcept {
        if (total_ == 0) return 0;
        auto rank = static_cast<std::uint64_t>(p / 100.0 * static_cast<double>(total_) + 0.5);
        rank = std::clamp<std::uint64_t>(rank, 1, total_);
        if (rank == total_) return max_;
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < bucket_count; ++i) {
            seen += counts_[i];
            if (seen >= rank)
                return std::min(max_, std::max(min_, bucket_low(i) + bucket_width(i) / 2));
        }
        return max_;
    }
    const std::vector<std::uint64_t>& counts() const noexcept { return counts_; }

  private:
    friend class live_histogram;
    std::vector<std::uint64_t> counts_;
    std::uint64_t total_ = 0;
    std::uint64_t max_ = 0;
    std::uint64_t min_ = UINT64_MAX;
    double sum_ = 0;
};

/// A histogram with one writer and concurrent readers (see the header).
class live_histogram {
  public:
    live_histogram() : counts_(bucket_count) {}

    void record(std::uint64_t v) noexcept {
        smarm::detail::bump(counts_[bucket_of(v)], 1);
        smarm::detail::bump(total_, 1);
        smarm::detail::bump(sum_, v);
        if (v > max_.load(std::memory_order_relaxed)) max_.store(v, std::memory_order_relaxed);
        if (v < min_.load(std::memory_order_relaxed)) min_.store(v, std::memory_order_relaxed);
    }
    std::uint64_t count() const noexcept { return total_.load(std::memory_order_relaxed); }
    void merge_into(histogram& h) const noexcept {
        std::uint64_t n = 0;
        for (std::size_t i = 0; i < bucket_count; ++i) {
            const auto c = counts_[i].load(std::memory_order_relaxed);
            h.counts_[i] += c;
            n += c;
        }
        if (n == 0) return;
        // The total is the buckets' own sum, so percentiles stay consistent
        // with the counts just read.
        h.total_ += n;
        h.max_ = std::max(h.max_, max_.load(std::memory_order_relaxed));
        h.min_ = std::min(h.min_, min_.load(std::memory_order_relaxed));
        h.sum_ += static_cast<double>(sum_.load(std::memory_order_relaxed));
    }

  private:
    std::vector<std::atomic<std::uint64_t>> counts_;
    std::atomic<std::uint64_t> total_{0};
    std::atomic<std::uint64_t> sum_{0};
    std::atomic<std::uint64_t> max_{0};
    std::atomic<std::uint64_t> min_{UINT64_MAX};
};

}  // namespace smarm::load
