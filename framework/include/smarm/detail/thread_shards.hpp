#pragma once
// smarm::detail::thread_shards<Shard>: one Shard per OS thread that uses
// it, for counts written on a hot path by whichever thread runs the code
// and merged by readers (the HTTP request families, smarm-load's counts).
// Counts shared by every scheduler bounce their cache lines between cores;
// counts per actor or per connection are cold at every use and cost memory
// per connection.
//
// Invariants:
// - mine() is the calling thread's shard, made at its first call. Only
//   that thread writes its counts (a relaxed load and a relaxed store, no
//   read-modify-write: bump()); readers load them relaxed and see each
//   count whole and never decreasing. An actor that parks or yields may
//   resume on another thread: take mine() again after any wait, and count
//   into it at once. The first call runs under no_preempt, so the shard it
//   registers for this thread is used on this thread.
// - The shard is found through a thread_local (instance id, shard) pair per
//   Shard type, read through a noinline, noipa function: GCC keeps a TLS
//   address across a context switch otherwise (HACKING.md's traps). Ids are
//   never reused, so a pair left by a destroyed instance never matches a
//   new one. Two live instances of one Shard type used on one thread take
//   turns in the pair (a search under the lock at each turn): correct,
//   slower.
// - Shards live as long as the instance (a thread that ends leaves its
//   shard and its counts); each() visits them under the lock, so a shard
//   being made is either fully there or not yet.

#include <smarm/runtime.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <smarm/detail/bump.hpp>

namespace smarm::detail {

template <class Shard>
class thread_shards {
  public:
    /// `make` makes a thread's shard at its first mine().
    explicit thread_shards(std::function<std::unique_ptr<Shard>()> make)
        : make_(std::move(make)) {}
    thread_shards(const thread_shards&) = delete;
    thread_shards& operator=(const thread_shards&) = delete;

    /// The calling thread's shard (see the invariants).
    Shard& mine() {
        cache& c = this_thread();
        if (c.id == id_) [[likely]]
            return *c.shard;
        return first_use();
    }
    /// Calls f(const Shard&) for every shard made so far, under the lock.
    template <class F>
    void each(F&& f) const {
        std::lock_guard g(mu_);
        for (const entry& e : shards_)
            f(static_cast<const Shard&>(*e.shard));
    }

  private:
    struct cache {
        std::uint64_t id = 0;
        Shard* shard = nullptr;
    };
    struct entry {
        std::thread::id owner;
        std::unique_ptr<Shard> shard;
    };
    [[gnu::noinline, gnu::noipa]] static cache& this_thread() noexcept {
        thread_local cache c;
        return c;
    }
    [[gnu::noinline]] Shard& first_use() {
        no_preempt hold;  // made for this thread, used on it
        const std::thread::id self = std::this_thread::get_id();
        Shard* found = nullptr;
        {
            std::lock_guard g(mu_);
            for (const entry& e : shards_)
                if (e.owner == self) found = e.shard.get();
            if (found == nullptr) {
                shards_.push_back({self, make_()});
                found = shards_.back().shard.get();
            }
        }
        this_thread() = {id_, found};
        return *found;
    }

    static inline std::atomic<std::uint64_t> next_id{1};
    const std::uint64_t id_ = next_id.fetch_add(1, std::memory_order_relaxed);
    const std::function<std::unique_ptr<Shard>()> make_;
    mutable std::mutex mu_;
    std::vector<entry> shards_;  // guarded by mu_
};

}  // namespace smarm::detail
