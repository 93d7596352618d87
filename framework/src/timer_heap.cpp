#include "timer_heap.hpp"

#include <smarm/detail/assert.hpp>

namespace smarm::internal {

std::uint64_t timer_heap::insert(entry e) {
    std::uint32_t idx;
    if (!free_.empty()) {
        idx = free_.back();
        free_.pop_back();
        std::uint32_t reuse = slab_[idx].reuse + 1;
        slab_[idx] = std::move(e);
        slab_[idx].reuse = reuse;
    } else {
        idx = static_cast<std::uint32_t>(slab_.size());
        slab_.push_back(std::move(e));
    }
    slab_[idx].seq = next_seq_++;
    heap_.push_back(idx);
    slab_[idx].heap_pos = static_cast<std::uint32_t>(heap_.size() - 1);
    sift_up(heap_.size() - 1);
    return (std::uint64_t{slab_[idx].reuse} << 32) | idx;
}

std::uint64_t timer_heap::insert_wake(time_point deadline, pid target, std::uint32_t epoch,
                                      anchor a) {
    entry e;
    e.deadline = deadline;
    e.anchored = a;
    e.target = target;
    e.epoch = epoch;
    return insert(std::move(e));
}

std::uint64_t timer_heap::insert_call(time_point deadline, unique_function fn, anchor a) {
    entry e;
    e.deadline = deadline;
    e.anchored = a;
    e.call = std::move(fn);
    return insert(std::move(e));
}

bool timer_heap::cancel(std::uint64_t id) noexcept {
    auto idx = static_cast<std::uint32_t>(id & 0xffff'ffffu);
    auto reuse = static_cast<std::uint32_t>(id >> 32);
    if (idx >= slab_.size()) return false;
    entry& e = slab_[idx];
    if (e.reuse != reuse || e.heap_pos == npos) return false;
    remove_at(e.heap_pos);
    return true;
}

void timer_heap::remove_at(std::size_t pos) noexcept {
    SMARM_INVARIANT(pos < heap_.size() && slab_[heap_[pos]].heap_pos == pos,
                    "timer_heap: a heap position and its entry disagree");
    std::uint32_t idx = heap_[pos];
    std::uint32_t last = heap_.back();
    heap_.pop_back();
    if (pos < heap_.size()) {
        place(pos, last);
        sift_up(pos);
        sift_down(slab_[last].heap_pos);
    }
    slab_[idx].heap_pos = npos;
    slab_[idx].call = unique_function{};
    free_.push_back(idx);
}

void timer_heap::pop_due(time_point now, std::vector<fired>& out, delay_now d) {
    while (!heap_.empty() && slab_[heap_[0]].deadline <= now) {
        entry& e = slab_[heap_[0]];
        if (!e.anchored.wall && d.ledger > e.anchored.stamp) [[unlikely]] {
            const double ns = static_cast<double>(d.ledger - e.anchored.stamp) * d.ns_per_tick;
            e.anchored.stamp = d.ledger;
            const auto room = time_point::max() - e.deadline;
            const auto shift = std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
            const time_point shifted = shift >= room ? time_point::max() : e.deadline + shift;
            if (shifted > now) {  // not due in virtual time yet
                e.deadline = shifted;
                sift_down(0);
                continue;
            }
        }
        out.push_back(fired{e.target, e.epoch, std::move(e.call)});
        remove_at(0);
    }
}

std::optional<timer_heap::time_point> timer_heap::peek() const noexcept {
    if (heap_.empty()) return std::nullopt;
    return slab_[heap_[0]].deadline;
}

void timer_heap::clear() noexcept {
    slab_.clear();
    free_.clear();
    heap_.clear();
}

void timer_heap::sift_up(std::size_t pos) noexcept {
    std::uint32_t idx = heap_[pos];
    while (pos > 0) {
        std::size_t parent = (pos - 1) / 2;
        if (!less(idx, heap_[parent])) break;
        place(pos, heap_[parent]);
        pos = parent;
    }
    place(pos, idx);
}

void timer_heap::sift_down(std::size_t pos) noexcept {
    std::uint32_t idx = heap_[pos];
    const std::size_t n = heap_.size();
    for (;;) {
        std::size_t child = 2 * pos + 1;
        if (child >= n) break;
        if (child + 1 < n && less(heap_[child + 1], heap_[child])) ++child;
        if (!less(heap_[child], idx)) break;
        place(pos, heap_[child]);
        pos = child;
    }
    place(pos, idx);
}

}  // namespace smarm::internal
