#include <smarm/progress.hpp>

namespace smarm {

namespace {
// Lock-free intrusive list: points are only ever added (statics), so a
// reader walking from the head sees a consistent prefix.
std::atomic<progress_point*> g_head{nullptr};
}  // namespace

progress_point::progress_point(const char* name) noexcept : name_(name) {
    progress_point* head = g_head.load(std::memory_order_relaxed);
    do {
        next_ = head;
        // release: publishes name_ and next_ to snapshot() readers.
    } while (!g_head.compare_exchange_weak(head, this, std::memory_order_release,
                                           std::memory_order_relaxed));
}

std::map<std::string, std::uint64_t> progress_point::snapshot() {
    std::map<std::string, std::uint64_t> out;
    // acquire: pairs with the registration's release.
    for (progress_point* p = g_head.load(std::memory_order_acquire); p != nullptr; p = p->next_)
        out[p->name_] += p->count();
    return out;
}

}  // namespace smarm
