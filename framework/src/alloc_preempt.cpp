// smarm::alloc_preempt — link this library to make allocations observation
// points (see runtime_config::alloc_check_interval). It replaces the global
// operator new/delete with malloc/free plus one check; with the interval at
// 0 the check is a thread-local read, a call and a branch.

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/wait.hpp>

#include <cstdlib>
#include <new>

namespace {

// Linking this library turns on the runtime-lock depth tracking that
// alloc_observe() relies on.
const bool tracking_on = [] {
    smarm::detail::track_lock_depth.store(true, std::memory_order_relaxed);
    return true;
}();

void* allocate(std::size_t n) {
    smarm::detail::alloc_observe();
    if (n == 0) n = 1;
    for (;;) {
        if (void* p = std::malloc(n)) return p;
        std::new_handler h = std::get_new_handler();
        if (h == nullptr) throw std::bad_alloc();
        h();
    }
}

void* allocate_aligned(std::size_t n, std::align_val_t al) {
    smarm::detail::alloc_observe();
    auto a = static_cast<std::size_t>(al);
    if (n == 0) n = 1;
    n = (n + a - 1) / a * a;
    for (;;) {
        if (void* p = std::aligned_alloc(a, n)) return p;
        std::new_handler h = std::get_new_handler();
        if (h == nullptr) throw std::bad_alloc();
        h();
    }
}

}  // namespace

void* operator new(std::size_t n) {
    return allocate(n);
}
void* operator new[](std::size_t n) {
    return allocate(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    try {
        return allocate(n);
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
    return operator new(n, t);
}
void* operator new(std::size_t n, std::align_val_t a) {
    return allocate_aligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
    return allocate_aligned(n, a);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}

// Referenced through the link options of smarm::alloc_preempt, so the linker
// always pulls this object in, even when a sanitizer runtime already
// defines operator new before the archive is searched.
extern "C" {
extern const int smarm_alloc_preempt_anchor;
const int smarm_alloc_preempt_anchor = 1;
}
