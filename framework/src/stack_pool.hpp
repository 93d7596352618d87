#pragma once
// Actor stacks: mmap'ed, guarded, pooled.
//
// A stack is one anonymous mapping: [guard page (PROT_NONE)][usable pages].
// Only touched pages cost memory, so stacks get generous address space.
// Finished actors return their stack to the pool; spawn reuses it, so the
// steady state performs no mmap/munmap.
//
// vm.max_map_count: a guarded stack is two kernel mappings (the guard splits
// the region), so the default limit of 65530 caps guarded stacks near 32k.
// The pool is given a budget computed from the limit at runtime start (after
// trying to raise the limit); past it, acquire() throws spawn_error naming
// the sysctl instead of silently running an unguarded stack. A failed
// mprotect is never ignored (Boost's protected stack ignores it in release
// builds).
//
// Thread safety: acquire/release are safe from any thread (one spinlock).

#include <cstddef>
#include <vector>

#include <smarm/detail/spinlock.hpp>

#include "internal.hpp"

namespace smarm::internal {

struct stack_mem {
    char* base = nullptr;   ///< lowest address (the guard page when guarded)
    std::size_t size = 0;   ///< total mapping size
    std::size_t guard = 0;  ///< guard bytes at the bottom
    char* top() const noexcept { return base + size; }
    char* bottom() const noexcept { return base + guard; }
    std::size_t usable() const noexcept { return size - guard; }
    explicit operator bool() const noexcept { return base != nullptr; }
};

class stack_pool {
  public:
    /// `usable` is rounded up to whole pages; `max_stacks` bounds the number
    /// of stacks mapped at once (0 = unbounded).
    stack_pool(std::size_t usable, bool guard, std::size_t max_stacks);
    ~stack_pool();
    stack_pool(const stack_pool&) = delete;
    stack_pool& operator=(const stack_pool&) = delete;

    /// A pooled stack, or a fresh mapping. Throws smarm::spawn_error.
    stack_mem acquire();
    void release(stack_mem s) noexcept;
    /// Unmap pooled stacks beyond `keep`.
    void trim(std::size_t keep) noexcept;

    std::size_t mapped() const noexcept { return mapped_; }
    std::size_t pooled() const noexcept;

  private:
    std::size_t usable_, guard_, max_stacks_;
    mutable spinlock mu_;
    std::vector<stack_mem> free_;  // guarded by mu_
    std::size_t mapped_ = 0;       // guarded by mu_
};

/// Reads /proc/sys/vm/max_map_count (0 when unreadable).
std::size_t read_max_map_count() noexcept;
/// Tries to raise vm.max_map_count to at least `want`; returns the value in
/// force afterwards.
std::size_t raise_max_map_count(std::size_t want) noexcept;

}  // namespace smarm::internal
