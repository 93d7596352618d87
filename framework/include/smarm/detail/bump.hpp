#pragma once
// smarm::detail::bump: adds to a counter that one thread writes at a time
// (a scheduler's counters, an actor's own, a per-thread shard) while others
// may read it. A relaxed load and a relaxed store, no lock prefix: with a
// single writer no increment is lost, and readers (stats, scrapes) see each
// value whole. Two concurrent writers would lose increments: that is what
// the single-writer rule at each use site rules out.

#include <atomic>
#include <type_traits>

namespace smarm::detail {

/// Adds `by` to `count`, which only the calling thread writes now.
template <class U>
inline void bump(std::atomic<U>& count, std::type_identity_t<U> by = 1) noexcept {
    count.store(count.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace smarm::detail
