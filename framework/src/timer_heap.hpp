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
// Thread safety: none; timer_service guards it with its lock.

#include <smarm/pid.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include <smarm/detail/unique_function.hpp>

#include "internal.hpp"

namespace smarm::internal {

class timer_heap {
  public:
    using time_point = std::chrono::steady_clock::time_point;

    struct fired {
        pid target;
        std::uint32_t epoch = 0;
        unique_function call;  ///< set for call timers
    };

    std::uint64_t insert_wake(time_point deadline, pid target, std::uint32_t epoch);
    std::uint64_t insert_call(time_point deadline, unique_function fn);
    /// True when the timer was still pending (it will now never fire).
    bool cancel(std::uint64_t id) noexcept;
    /// Moves every entry with deadline <= now into `out`, earliest first.
    void pop_due(time_point now, std::vector<fired>& out);
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
