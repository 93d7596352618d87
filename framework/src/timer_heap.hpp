#pragma once
// The runtime's single timer heap: a binary min-heap ordered by
// (deadline, insertion sequence), with O(log n) cancellation.
//
// Entries live in a slab; the heap holds slab indices and every entry knows
// its heap position, so cancel() removes it at once instead of leaving a
// tombstone (waits with long timeouts that end early would otherwise pile
// up). A timer id is (slab index, reuse generation): a stale id never
// cancels a later timer that reused the slab entry.
//
// Two kinds: `wake` (unpark_at(pid, epoch): sleeps and wait timeouts, inert
// when the wait already ended) and `call` (a thunk: send_after).
//
// Virtual time (the causal profiler, include/smarm/causal.hpp): an entry
// records the global delay ledger when it was armed (`stamp`). When it
// comes due, the delay injected since is added to its deadline; if that
// moves it past now, it goes back into the heap at the shifted deadline
// (same id) instead of firing, so a profiled program's timeouts keep their
// length in its virtual time. A `wall` entry is never shifted. With no
// delay ever injected every stamp equals the ledger and nothing shifts.
//
// Thread safety: none; timer_service guards it with its lock.

#include <smarm/pid.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include <smarm/detail/unique_function.hpp>

#include "internal.hpp"

namespace smarm::internal {

/// How a timer is anchored: the ledger reading at arm, or wall time.
struct timer_anchor {
    std::uint64_t stamp = 0;  ///< global delay (ticks) when armed
    bool wall = false;        ///< exempt from the virtual-time shift
};
/// The global delay now, and the tick length to convert it.
struct timer_delay_now {
    std::uint64_t ledger = 0;
    double ns_per_tick = 0;
};

class timer_heap {
  public:
    using time_point = std::chrono::steady_clock::time_point;

    struct fired {
        pid target;
        std::uint32_t epoch = 0;
        unique_function call;  ///< set for call timers
    };

    using anchor = timer_anchor;
    using delay_now = timer_delay_now;

    std::uint64_t insert_wake(time_point deadline, pid target, std::uint32_t epoch, anchor a = {});
    std::uint64_t insert_call(time_point deadline, unique_function fn, anchor a = {});
    /// True when the timer was still pending (it will now never fire).
    bool cancel(std::uint64_t id) noexcept;
    /// Moves every entry due at `now` into `out`, earliest first; an entry
    /// whose deadline shifted by the delay injected since it was armed past
    /// `now` is requeued instead.
    void pop_due(time_point now, std::vector<fired>& out, delay_now d = {});
    std::optional<time_point> peek() const noexcept;
    std::size_t size() const noexcept { return heap_.size(); }
    bool empty() const noexcept { return heap_.empty(); }
    void clear() noexcept;

  private:
    static constexpr std::uint32_t npos = 0xffff'ffffu;
    struct entry {
        time_point deadline;
        std::uint64_t seq = 0;
        pid target;
        std::uint32_t epoch = 0;
        unique_function call;
        std::uint32_t heap_pos = npos;
        std::uint32_t reuse = 0;
        anchor anchored;
    };
    std::uint64_t insert(entry e);
    bool less(std::uint32_t a, std::uint32_t b) const noexcept {
        const entry& x = slab_[a];
        const entry& y = slab_[b];
        return x.deadline < y.deadline || (x.deadline == y.deadline && x.seq < y.seq);
    }
    void place(std::size_t pos, std::uint32_t idx) noexcept {
        heap_[pos] = idx;
        slab_[idx].heap_pos = static_cast<std::uint32_t>(pos);
    }
    void sift_up(std::size_t pos) noexcept;
    void sift_down(std::size_t pos) noexcept;
    void remove_at(std::size_t pos) noexcept;

    std::vector<entry> slab_;
    std::vector<std::uint32_t> free_;
    std::vector<std::uint32_t> heap_;
    std::uint64_t next_seq_ = 0;
};

}  // namespace smarm::internal
