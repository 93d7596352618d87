#pragma once
// The slot table: fixed capacity, lazily materialized in chunks.
//
// A slot is the home of one actor incarnation: the hot state word (lock-free)
// plus a cold part under a small spinlock. Capacity is fixed at construction
// (runtime_config::max_actors) so a pid's index is always decodable, but the
// memory for slots is allocated a chunk at a time as the high-water mark
// grows; chunk pointers are published with release stores so lookups never
// lock.

#include <smarm/detail/assert.hpp>
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

#include "internal.hpp"

namespace smarm::internal {

/// Observation points between two clock reads for an actor not yet measured,
/// and the most the adaptation allows (observe.cpp, adapt_obs_period).
inline constexpr std::uint8_t obs_period_initial = 8;
inline constexpr std::uint8_t obs_period_max = 64;

/// Layout: spawn, switch, finish, join and reclaim touch only the first two
/// cache lines (a spawn+join benchmark holding 200k handles missed ~5 lines
/// per actor with the earlier 272-byte layout); what only calls, timed
/// waits, monitors or the sanitizers use comes after.
struct alignas(64) slot {
    // ---- line 0: the lifecycle ----
    state_word word;
    /// (1 << 32 | generation) of the incarnation a stop was requested for;
    /// keyed by generation so a stale request never stops a later tenant.
    std::atomic<std::uint64_t> stop_for{0};
    /// 1 while the actor has not finished + 1 per join_handle; the thread that
    /// drops it to 0 reclaims the slot.
    std::atomic<std::uint32_t> refs{0};
    std::uint32_t index = 0;  // immutable
    // Owned by whoever runs the actor (its scheduler, then itself):
    std::uint32_t no_preempt = 0;  ///< no_preempt nesting depth
    std::uint8_t end_kind_ = 0;    ///< exit_kind, see end_kind()
    bool pg_member = false;        ///< joined a process group (finalize evicts it)
    spinlock cold_mu;              ///< guards the cold part (below)
    /// Observation points between clock reads that suit this actor, learned
    /// by the observation point (observe.cpp, adapt_obs_period); a fresh
    /// slice starts its count from here. Relaxed: it only steers when the
    /// clock is read, and a scheduler may raise it for an actor it ran
    /// earlier in a slice (scheduler::obs_capper).
    std::atomic<std::uint8_t> obs_period{obs_period_initial};
    void* ctx = nullptr;  ///< suspended fcontext
    void* task = nullptr;
    const task_vtable* vt = nullptr;
    std::exception_ptr end_error;

    // ---- line 1 ----
    stack_mem stack;
    void* eh_caught = nullptr;  ///< saved __cxa_eh_globals while switched out
    unsigned eh_uncaught = 0;
    std::atomic<std::uint32_t> overruns{0};  ///< slices overrun (introspection)
    pid parent;                              // guarded by cold_mu
    /// Monitors, links, the exit trap and joiners waiting for a running
    /// actor: most actors have none, so they live in an extension allocated
    /// on first use (keeps the slot small: every parked actor pays for it).
    struct cold_ext {
        std::vector<std::pair<std::uint64_t, sender<down>>> monitors;
        std::vector<pid> links;
        std::optional<sender<exit_signal>> trap;
        std::vector<std::pair<pid, std::uint32_t>> joiners;
    };
    std::unique_ptr<cold_ext> ext;           // guarded by cold_mu
    std::atomic<std::uint64_t> messages{0};  ///< messages received (introspection)

    // ---- the rest ----
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
    /// The sanitizers' fiber state: TSan's fiber or ASan's fake stack (the
    /// two never share a build; fiber.cpp).
    union {
        void* tsan_fiber = nullptr;
        void* asan_fake_stack;
    };
    /// On-CPU time (ticks), sampled: each observation point's clock read
    /// adds the time since the previous read of the window it ran in
    /// (observe.cpp); a run that parks before its first read adds nothing.
    /// Written by the thread running the actor, read by introspection.
    std::atomic<std::uint64_t> cpu_ticks{0};
    /// The causal profiler's per-actor state (causal.cpp), owned by the
    /// thread running the actor: the site it is in, and its own debt from
    /// waits on the world outside (the shared delay is the core's ledger,
    /// scheduler::causal_delay).
    std::uint32_t causal_site = 0;
    std::uint32_t causal_handoff = 0;  ///< the site its gen_server calls are handled in
    /// The wait in progress is on the world outside (IO readiness, a
    /// blocking-pool job): its resume owes the delay, not forgives it.
    bool causal_external = false;
    /// What its last park waited for (detail::wait_reason), written by the
    /// thread running it at each park; relaxed: introspection reads it
    /// beside the state word, a snapshot is per actor, not a protocol.
    std::atomic<std::uint8_t> wait_why{0};
    std::uint32_t causal_debt_window = 0;  ///< the window (its epoch) the debt is from
    std::uint64_t causal_ext_base = 0;     ///< the global ledger when that wait began
    std::uint64_t causal_debt = 0;         ///< ticks owed by this actor itself
    /// A tick read at the switch-out, consumed at resume (0: none): with
    /// causal_external, when the wait on the world outside began (an
    /// in-site one is attributed); else when the actor yielded inside the
    /// experiment's site (its runnable wait is counted, not attributed).
    std::uint64_t causal_stamp = 0;

    /// How the actor ended (written by the actor before it finishes).
    exit_kind end_kind() const noexcept { return static_cast<exit_kind>(end_kind_); }
    void set_end_kind(exit_kind k) noexcept { end_kind_ = static_cast<std::uint8_t>(k); }

    /// The extension, allocated if needed. Caller holds cold_mu.
    cold_ext& ext_make() {
        SMARM_ASSERT(cold_mu.is_held());
        if (!ext) ext = std::make_unique<cold_ext>();
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

// Four cache lines; the first two are the hot ones (see the layout note).
static_assert(sizeof(slot) == 256, "slot layout: keep the lifecycle fields in two lines");

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
        // out is consumed from the back. Recycled indices go last, in one
        // block, so the most recently freed (warmest) is handed out first;
        // fresh ones (only when the free list runs short) go below them,
        // lowest index nearest the back.
        const std::size_t k = std::min(n, free_.size());
        const std::size_t first_fresh = out.size();
        for (std::size_t m = n - k; m > 0; --m) {
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
        std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first_fresh), out.end());
        out.insert(out.end(), free_.end() - static_cast<std::ptrdiff_t>(k), free_.end());
        free_.resize(free_.size() - k);
    }
    /// Returns the indices of a scheduler cache beyond its first `keep` to
    /// the shared free list.
    void release_batch(std::vector<std::uint32_t>& in, std::size_t keep) {
        if (in.size() <= keep) return;
        std::lock_guard g(mu_);
        free_.insert(free_.end(), in.begin() + static_cast<std::ptrdiff_t>(keep), in.end());
        in.resize(keep);
    }

  private:
    std::size_t capacity_;
    std::vector<std::atomic<slot*>> chunks_;
    mutable spinlock mu_;
    std::vector<std::uint32_t> free_;    // guarded by mu_ (LIFO: reuse warm slots)
    std::atomic<std::size_t> fresh_{0};  // written under mu_
};

}  // namespace smarm::internal
