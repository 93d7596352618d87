#pragma once
// The slot table: fixed capacity, lazily materialized in chunks.
//
// A slot is the home of one actor incarnation: the hot state word (lock-free)
// plus a cold part under a small spinlock. Capacity is fixed at construction
// (runtime_config::max_actors) so a pid's index is always decodable, but the
// memory for slots is allocated a chunk at a time as the high-water mark
// grows; chunk pointers are published with release stores so lookups never
// lock.

#include <smarm/monitor.hpp>
#include <smarm/pid.hpp>
#include <smarm/runtime.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <smarm/detail/spinlock.hpp>

#include <smarm/detail/reply_cell.hpp>

#include "stack_pool.hpp"
#include "state_word.hpp"

namespace smarm::detail {

struct slot {
    // ---- hot, lock-free ----
    state_word word;
    /// (1 << 32 | generation) of the incarnation a stop was requested for;
    /// keyed by generation so a stale request never stops a later tenant.
    std::atomic<std::uint64_t> stop_for{0};
    /// 1 while the actor has not finished + 1 per join_handle; the thread that
    /// drops it to 0 reclaims the slot.
    std::atomic<std::uint32_t> refs{0};
    std::atomic<std::uint64_t> overruns{0};
    std::atomic<std::uint64_t> messages{0};
    std::uint32_t index = 0;  // immutable

    // ---- owned by whoever runs the actor (its scheduler, then itself) ----
    void* ctx = nullptr;  ///< suspended fcontext
    stack_mem stack;
    void* task = nullptr;
    const task_vtable* vt = nullptr;
    std::uint32_t no_preempt = 0;  ///< no_preempt nesting depth
    bool pg_member = false;        ///< joined a process group (finalize evicts it)
    void* eh_caught = nullptr;     ///< saved __cxa_eh_globals while switched out
    unsigned eh_uncaught = 0;
    void* tsan_fiber = nullptr;
    void* asan_fake_stack = nullptr;
    exit_kind end_kind = exit_kind::exit;  ///< written by the actor before it finishes
    std::exception_ptr end_error;
    reply_cell reply;  ///< the reply to this slot's current call (detail/reply_cell.hpp)
    /// The wake timer of a timed wait, armed lazily (detail::defer_wake):
    /// set by the actor, armed by the scheduler it parked on, disarmed by
    /// the actor when the wait ends.
    struct deferred_wake {
        enum class state : std::uint8_t { none, deferred, armed };
        spinlock mu;
        state st = state::none;    // guarded by mu
        std::uint32_t epoch = 0;   // guarded by mu
        std::uint64_t at = 0;      // guarded by mu: ticks() when the wait began
        std::int64_t timeout = 0;  // guarded by mu: nanoseconds after `at`
        std::uint64_t id = 0;      // guarded by mu: the heap timer once armed
    } dwake;

    // ---- cold ----
    spinlock cold_mu;
    pid parent;                                          // guarded by cold_mu
    std::vector<std::pair<pid, std::uint32_t>> joiners;  // guarded by cold_mu
    /// Monitors, links and the exit trap: most actors have none, so they
    /// live in an extension allocated on first use (keeps the slot small:
    /// every parked actor pays for its slot).
    struct links_ext {
        std::vector<std::pair<std::uint64_t, sender<down>>> monitors;
        std::vector<pid> links;
        std::optional<sender<exit_signal>> trap;
    };
    std::unique_ptr<links_ext> ext;  // guarded by cold_mu
    /// The extension, allocated if needed. Caller holds cold_mu.
    links_ext& ext_make() {
        if (!ext) ext = std::make_unique<links_ext>();
        return *ext;
    }

    /// Is `p` this slot's current, still running incarnation (not vacant, not
    /// done, same generation)? Lock-free; a stale pid is always false.
    bool holds(pid p) const noexcept {
        std::uint64_t w = word.load();
        auto st = state_word::state_of(w);
        return state_word::gen_of(w) == p.generation && st != actor_state::vacant &&
               st != actor_state::done;
    }

    bool stop_pending(std::uint32_t gen) const noexcept {
        // relaxed: a late observation only delays the stop to the next
        // observation point; stop_wake's CAS orders it for parked actors.
        return stop_for.load(std::memory_order_relaxed) == ((std::uint64_t{1} << 32) | gen);
    }
};

class slot_table {
  public:
    static constexpr std::size_t chunk_bits = 12;
    static constexpr std::size_t chunk_size = std::size_t{1} << chunk_bits;

    explicit slot_table(std::size_t capacity)
        : capacity_(capacity), chunks_((capacity + chunk_size - 1) / chunk_size) {
        for (auto& c : chunks_)
            c.store(nullptr, std::memory_order_relaxed);
    }
    ~slot_table() {
        for (auto& c : chunks_)
            delete[] c.load(std::memory_order_relaxed);
    }
    slot_table(const slot_table&) = delete;
    slot_table& operator=(const slot_table&) = delete;

    std::size_t capacity() const noexcept { return capacity_; }
    /// Slots ever materialized: iterate [0, high_water()) for snapshots.
    std::size_t high_water() const noexcept { return fresh_.load(std::memory_order_acquire); }

    slot* at(std::uint32_t idx) const noexcept {
        if (idx >= capacity_) return nullptr;
        // acquire: pairs with the release publication of a new chunk.
        slot* chunk = chunks_[idx >> chunk_bits].load(std::memory_order_acquire);
        return chunk ? &chunk[idx & (chunk_size - 1)] : nullptr;
    }

    /// A vacant slot, or nullptr when all `capacity` slots are in use.
    slot* allocate() {
        std::vector<std::uint32_t> one;
        allocate_batch(one, 1);
        return one.empty() ? nullptr : at(one.back());
    }
    void release(std::uint32_t idx) {
        std::lock_guard g(mu_);
        free_.push_back(idx);
    }
    /// Moves up to `n` vacant slot indices into `out` (a scheduler's cache,
    /// so the common spawn takes no shared lock).
    void allocate_batch(std::vector<std::uint32_t>& out, std::size_t n) {
        std::lock_guard g(mu_);
        while (n > 0 && !free_.empty()) {
            out.push_back(free_.back());
            free_.pop_back();
            --n;
        }
        for (; n > 0; --n) {
            std::size_t idx = fresh_.load(std::memory_order_relaxed);
            if (idx >= capacity_) break;
            auto& chunk = chunks_[idx >> chunk_bits];
            if (chunk.load(std::memory_order_relaxed) == nullptr) {
                slot* c = new slot[chunk_size];
                for (std::size_t i = 0; i < chunk_size; ++i)
                    c[i].index = static_cast<std::uint32_t>((idx & ~(chunk_size - 1)) + i);
                chunk.store(c, std::memory_order_release);
            }
            fresh_.store(idx + 1, std::memory_order_release);
            out.push_back(static_cast<std::uint32_t>(idx));
        }
        // Hand out low indices first.
        std::reverse(out.begin(), out.end());
    }
    /// Returns the indices of a scheduler cache to the shared free list.
    void release_batch(std::vector<std::uint32_t>& in, std::size_t keep) {
        std::lock_guard g(mu_);
        while (in.size() > keep) {
            free_.push_back(in.back());
            in.pop_back();
        }
    }

  private:
    std::size_t capacity_;
    std::vector<std::atomic<slot*>> chunks_;
    mutable spinlock mu_;
    std::vector<std::uint32_t> free_;    // guarded by mu_ (LIFO: reuse warm slots)
    std::atomic<std::size_t> fresh_{0};  // written under mu_
};

}  // namespace smarm::detail
