#include "stack_pool.hpp"

#include <smarm/runtime.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

namespace smarm::internal {

namespace {
std::size_t page_size() noexcept {
    static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return p;
}
std::size_t round_up(std::size_t n, std::size_t to) noexcept {
    return (n + to - 1) / to * to;
}
}  // namespace

stack_pool::stack_pool(std::size_t usable, bool guard, std::size_t max_stacks)
    : usable_(round_up(usable, page_size())),
      guard_(guard ? page_size() : 0),
      max_stacks_(max_stacks) {}

stack_pool::~stack_pool() {
    trim(0);
}

stack_mem stack_pool::acquire() {
    {
        std::lock_guard g(mu_);
        if (!free_.empty()) {
            stack_mem s = free_.back();
            free_.pop_back();
            return s;
        }
        if (max_stacks_ != 0 && mapped_ >= max_stacks_)
            throw spawn_error("smarm::spawn: " + std::to_string(mapped_) +
                              " guarded stacks mapped, the budget allowed by vm.max_map_count=" +
                              std::to_string(read_max_map_count()) +
                              " (each guarded stack is two mappings); raise it with `sysctl -w "
                              "vm.max_map_count=N` (see README, Deployment)");
        ++mapped_;
    }
    const std::size_t total = usable_ + guard_;
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        std::lock_guard g(mu_);
        --mapped_;
        throw spawn_error(std::string("smarm::spawn: mmap of a ") + std::to_string(total) +
                          "-byte actor stack failed: " + std::strerror(e));
    }
    if (guard_ != 0 && mprotect(p, guard_, PROT_NONE) != 0) {
        int e = errno;
        munmap(p, total);
        std::lock_guard g(mu_);
        --mapped_;
        throw spawn_error(std::string("smarm::spawn: mprotect of a stack guard page failed (") +
                          std::strerror(e) +
                          "); vm.max_map_count=" + std::to_string(read_max_map_count()) +
                          " is likely too low: raise it (see README, Deployment)");
    }
    return stack_mem{static_cast<char*>(p), total, guard_};
}

void stack_pool::release(stack_mem s) noexcept {
    std::lock_guard g(mu_);
    free_.push_back(s);
}

void stack_pool::trim(std::size_t keep) noexcept {
    std::vector<stack_mem> drop;
    {
        std::lock_guard g(mu_);
        while (free_.size() > keep) {
            drop.push_back(free_.back());
            free_.pop_back();
            --mapped_;
        }
    }
    for (auto& s : drop)
        munmap(s.base, s.size);
}

std::size_t stack_pool::pooled() const noexcept {
    std::lock_guard g(mu_);
    return free_.size();
}

std::size_t read_max_map_count() noexcept {
    std::ifstream f("/proc/sys/vm/max_map_count");
    std::size_t v = 0;
    if (!(f >> v)) return 0;
    return v;
}

std::size_t raise_max_map_count(std::size_t want) noexcept {
    std::size_t cur = read_max_map_count();
    if (cur >= want) return cur;
    {
        std::ofstream f("/proc/sys/vm/max_map_count");
        if (f) f << want << '\n';
    }
    return read_max_map_count();
}

}  // namespace smarm::internal
