#include "io_driver.hpp"

#include <smarm/detail/assert.hpp>
#include <smarm/detail/wait.hpp>
#include <smarm/runtime.hpp>

#include <linux/futex.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "causal.hpp"
#include "runtime_impl.hpp"
#include "trace_hooks.hpp"

namespace smarm::internal {

namespace {
constexpr std::uint64_t shutdown_tag = ~std::uint64_t{0};

std::uint64_t tag_of(const poll_desc* pd) noexcept {
    return (std::uint64_t{pd->gen} << 32) | pd->index;
}

[[noreturn]] void throw_errno(int e, const std::string& what) {
    throw std::system_error(e, std::generic_category(), what);
}
}  // namespace

io_driver::io_driver(runtime_impl& rt, unsigned blocking_threads, bool persistent_sockets)
    : rt_(rt),
      persistent_(persistent_sockets),
      chunks_(std::make_unique<std::atomic<poll_desc*>[]>(max_chunks)),
      pool_(blocking_threads) {
    for (std::size_t i = 0; i < max_chunks; ++i)
        chunks_[i].store(nullptr, std::memory_order_relaxed);
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) throw_errno(errno, "smarm io: epoll_create1");
    shutdown_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (shutdown_fd_ < 0) {
        int e = errno;
        ::close(epfd_);
        throw_errno(e, "smarm io: eventfd");
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = shutdown_tag;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, shutdown_fd_, &ev);
    epoll_thread_ = std::thread([this] {
        pthread_setname_np(pthread_self(), "smarm-epoll");
        epoll_loop();
    });
}

io_driver::~io_driver() {
    stopping_epoll_.store(true, std::memory_order_release);
    backstop_seq_.fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&backstop_seq_), FUTEX_WAKE_PRIVATE, 1,
            nullptr, nullptr, 0);
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(shutdown_fd_, &one, sizeof one);
    epoll_thread_.join();
    pool_.stop();
    ::close(shutdown_fd_);
    ::close(epfd_);
    for (std::size_t i = 0; i < max_chunks; ++i)
        delete[] chunks_[i].load(std::memory_order_relaxed);
}

poll_desc* io_driver::lookup(std::uint64_t data) noexcept {
    auto idx = static_cast<std::uint32_t>(data & 0xffff'ffffu);
    if ((idx >> chunk_bits) >= max_chunks) return nullptr;
    poll_desc* c = chunks_[idx >> chunk_bits].load(std::memory_order_acquire);
    return c ? &c[idx & (chunk_size - 1)] : nullptr;
}

poll_desc* io_driver::open(int fd, bool persistent) {
    poll_desc* pd = nullptr;
    {
        std::lock_guard g(table_mu_);
        std::uint32_t idx;
        if (!free_.empty()) {
            idx = free_.back();
            free_.pop_back();
        } else {
            if ((fresh_ >> chunk_bits) >= max_chunks)
                throw std::system_error(EMFILE, std::generic_category(),
                                        "smarm io: too many registered descriptors");
            idx = fresh_++;
            auto& chunk = chunks_[idx >> chunk_bits];
            if (chunk.load(std::memory_order_relaxed) == nullptr) {
                auto* c = new poll_desc[chunk_size];
                for (std::size_t i = 0; i < chunk_size; ++i)
                    c[i].index = static_cast<std::uint32_t>((idx & ~(chunk_size - 1)) + i);
                chunk.store(c, std::memory_order_release);
            }
        }
        pd = lookup(idx);
    }
    {
        std::lock_guard g(pd->mu);
        pd->fd = fd;
        pd->live = true;
        pd->oneshot = !persistent;
        pd->ready[0] = pd->ready[1] = false;
        pd->hup[0] = pd->hup[1] = false;
        pd->waiter[0] = pd->waiter[1] = pid{};
        // Both modes register on the first wait (ready_or_register).
        pd->registered = false;
    }
    return pd;
}

void io_driver::register_persistent(poll_desc* pd) {
    SMARM_ASSERT(pd->mu.is_held());
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = tag_of(pd);
    // ADD reports the readiness the fd already has, so an edge that came
    // between the caller's EAGAIN and now is not lost.
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, pd->fd, &ev) != 0)
        throw_errno(errno, "smarm io: registering fd " + std::to_string(pd->fd) + " with epoll");
    pd->registered = true;
}

void io_driver::close(poll_desc* pd, bool fd_closes_next) noexcept {
    pid woken[2];
    std::uint32_t epochs[2] = {0, 0};
    {
        std::lock_guard g(pd->mu);
        if (!pd->live) return;
        // Deregister before the owner closes the fd (a closed fd vanishes
        // from epoll by itself only when no dup of it survives).
        if (pd->registered && !fd_closes_next) epoll_ctl(epfd_, EPOLL_CTL_DEL, pd->fd, nullptr);
        pd->registered = false;
        for (int d = 0; d < 2; ++d) {
            if (pd->waiter[d].valid()) {
                woken[d] = std::exchange(pd->waiter[d], pid{});
                epochs[d] = pd->waiter_epoch[d];
                rt_.io_fd_waiters.fetch_sub(1, std::memory_order_acq_rel);
            }
        }
        pd->live = false;
        pd->fd = -1;
        ++pd->gen;
    }
    for (int d = 0; d < 2; ++d)
        if (woken[d].valid()) rt_.unpark_at(woken[d], epochs[d], current_scheduler());
    std::lock_guard g(table_mu_);
    free_.push_back(pd->index);
}

void io_driver::arm_oneshot(poll_desc* pd) {
    SMARM_ASSERT(pd->mu.is_held());
    epoll_event ev{};
    ev.events = EPOLLONESHOT | EPOLLRDHUP;
    if (pd->waiter[0].valid()) ev.events |= EPOLLIN;
    if (pd->waiter[1].valid()) ev.events |= EPOLLOUT;
    ev.data.u64 = tag_of(pd);
    // MOD re-arms an fd this descriptor already added; ADD otherwise. Never
    // MOD blindly: that would steal another descriptor's registration.
    if (epoll_ctl(epfd_, pd->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, pd->fd, &ev) == 0) {
        pd->registered = true;
        return;
    }
    if (errno == EEXIST)
        throw std::logic_error("smarm io: fd " + std::to_string(pd->fd) +
                               " is already being waited on by another actor (one waiter per "
                               "fd and direction; a raw fd takes one waiting actor at a time)");
    throw_errno(errno, "smarm io: epoll_ctl on fd " + std::to_string(pd->fd));
}

void io_driver::clear_waiter(poll_desc* pd, int dir) noexcept {
    SMARM_ASSERT(pd->mu.is_held());
    pd->waiter[dir] = pid{};
    rt_.io_fd_waiters.fetch_sub(1, std::memory_order_acq_rel);
    // Oneshot: no registration may outlive the last wait on this fd.
    if (pd->oneshot && pd->live && pd->registered && !pd->waiter[1 - dir].valid()) {
        epoll_ctl(epfd_, EPOLL_CTL_DEL, pd->fd, nullptr);
        pd->registered = false;
    }
}

bool io_driver::ready_or_register(poll_desc* pd, int dir, pid self, std::uint32_t epoch) {
    std::lock_guard g(pd->mu);
    // A closed fd is "ready": the call fails fast.
    if (!pd->live || pd->ready[dir] || pd->hup[dir]) return true;
    if (pd->waiter[dir].valid() && pd->waiter[dir] != self &&
        wait_is_open(pd->waiter[dir], pd->waiter_epoch[dir]))
        throw std::logic_error("smarm io: actor " + self.to_string() + " waits to " +
                               (dir ? "write" : "read") + " fd " + std::to_string(pd->fd) +
                               " while actor " + pd->waiter[dir].to_string() +
                               " already does (one waiter per fd and direction)");
    if (!pd->waiter[dir].valid()) rt_.io_fd_waiters.fetch_add(1, std::memory_order_acq_rel);
    pd->waiter[dir] = self;
    pd->waiter_epoch[dir] = epoch;
    if (pd->oneshot || !pd->registered) {
        try {
            if (pd->oneshot)
                arm_oneshot(pd);
            else
                register_persistent(pd);
        } catch (...) {
            clear_waiter(pd, dir);
            throw;
        }
    }
    return false;
}

void io_driver::unregister(poll_desc* pd, int dir, pid self, std::uint32_t epoch) noexcept {
    std::lock_guard g(pd->mu);
    if (pd->live && pd->waiter[dir] == self && pd->waiter_epoch[dir] == epoch)
        clear_waiter(pd, dir);
}

bool io_driver::wait(poll_desc* pd, int dir,
                     std::optional<std::chrono::steady_clock::time_point> deadline) {
    observe();
    int fd = -1;  // for the trace's wait label
    for (;;) {
        wait_token w = open_wait(dir ? "smarm::wait_writable" : "smarm::wait_readable");
        {
            std::lock_guard g(pd->mu);
            if (!pd->live) throw_errno(EBADF, "smarm io: waiting on a closed descriptor");
            fd = pd->fd;
            if (pd->ready[dir]) {  // an edge arrived since the last EAGAIN
                pd->ready[dir] = false;
                return true;
            }
            if (pd->hup[dir]) return true;  // the stream ended: the call sees it at once
        }
        // A deadline already past is not checked here (a clock read per
        // wait): its timer fires at once and the check after the park
        // reports the timeout.
        if (ready_or_register(pd, dir, w.self, w.epoch)) continue;
        std::uint64_t timer = deadline ? arm_wake_timer(*deadline, w.self, w.epoch) : 0;
        struct cleanup {
            io_driver* d;
            poll_desc* pd;
            int dir;
            wait_token w;
            std::uint64_t timer;
            slot& me;  // the actor's own slot: stable across migration
            ~cleanup() {
                causal_hooks::end_external_wait(me);
                if (timer) disarm_timer(timer);
                d->unregister(pd, dir, w.self, w.epoch);  // no-op if the event took it
            }
        } c{this, pd, dir, w, timer, *current_scheduler()->current};
        causal_hooks::on_external_wait(c.me);
        park(dir ? wait_reason::io_write : wait_reason::io_read, static_cast<std::uint32_t>(fd));
        std::lock_guard g(pd->mu);
        if (!pd->live) throw_errno(EBADF, "smarm io: descriptor closed while waiting");
        if (!(pd->waiter[dir] == w.self && pd->waiter_epoch[dir] == w.epoch)) {
            pd->ready[dir] = false;  // the epoll thread handed us this readiness
            return true;
        }
        // Still registered: the timer (or a deferred stop) woke us.
        if (deadline && clock::now() >= *deadline) return false;
    }
}

void io_driver::scheduler_idle() noexcept {
    // seq_cst: pairs with the epoll thread's resting store + mask read.
    if (backstop_resting_.load(std::memory_order_seq_cst)) {
        backstop_seq_.fetch_add(1, std::memory_order_seq_cst);
        syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&backstop_seq_), FUTEX_WAKE_PRIVATE, 1,
                nullptr, nullptr, 0);
    }
}

void io_driver::epoll_loop() {
    constexpr int batch = max_dispatch;
    epoll_event evs[batch];
    for (;;) {
        if (stopping_epoll_.load(std::memory_order_acquire)) return;
        if (!rt_.all_schedulers_idle()) {
            // Schedulers are awake and poll epoll themselves: rest.
            const std::uint32_t seq = backstop_seq_.load(std::memory_order_seq_cst);
            backstop_resting_.store(true, std::memory_order_seq_cst);
            if (!rt_.all_schedulers_idle() && !stopping_epoll_.load(std::memory_order_acquire)) {
                timespec ts{0, 10'000'000};
                syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&backstop_seq_),
                        FUTEX_WAIT_PRIVATE, seq, &ts, nullptr, 0);
            }
            backstop_resting_.store(false, std::memory_order_seq_cst);
            rt_.sample_core_share();  // reads /proc/stat once per window
            int n = epoll_wait(epfd_, evs, batch, 0);
            if (n > 0) dispatch(evs, n, nullptr);
            continue;
        }
        int n = epoll_wait(epfd_, evs, batch, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < n; ++i)
            if (evs[i].data.u64 == shutdown_tag) return;
        dispatch(evs, n, nullptr);
    }
}

std::size_t io_driver::poll(scheduler* caller) {
    constexpr int batch = 64;
    static_assert(batch <= max_dispatch);
    epoll_event evs[batch];
    int n = epoll_wait(epfd_, evs, batch, 0);
    return n > 0 ? dispatch(evs, n, caller) : 0;
}

std::size_t io_driver::dispatch(epoll_event* evs, int n, scheduler* caller) {
    // Who to unpark once the descriptor locks are released: up to two per
    // event (a reader and a writer). Trivial entries: an array of pids would
    // be constructed whole on every poll.
    struct wake_entry {
        std::uint32_t index, generation, epoch;
    };
    wake_entry wake[2 * max_dispatch];
    std::size_t woken = 0;
    for (int i = 0; i < n; ++i) {
        // The shutdown eventfd is level-triggered: a scheduler's poll may see
        // it too and leaves it for the epoll thread.
        if (evs[i].data.u64 == shutdown_tag) continue;
        poll_desc* pd = lookup(evs[i].data.u64);
        if (pd == nullptr) continue;
        const std::uint32_t e = evs[i].events;
        const bool dirs[2] = {(e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0,
                              (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0};
        std::lock_guard g(pd->mu);
        if (!pd->live || pd->gen != static_cast<std::uint32_t>(evs[i].data.u64 >> 32))
            continue;  // closed, maybe reused: a stale event
        if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) pd->hup[0] = true;
        if (e & (EPOLLHUP | EPOLLERR)) pd->hup[1] = true;
        for (int d = 0; d < 2; ++d) {
            if (!dirs[d]) continue;
            // The flag is what select() sees; a waiter in wait() consumes it.
            pd->ready[d] = true;
            if (pd->waiter[d].valid()) {
                const pid w = std::exchange(pd->waiter[d], pid{});
                wake[woken++] = {w.index, w.generation, pd->waiter_epoch[d]};
                rt_.io_fd_waiters.fetch_sub(1, std::memory_order_acq_rel);
                trace_hooks::event(trace_hooks::kind::io_ready, trace_hooks::word(w), 0,
                                   static_cast<std::uint32_t>(pd->fd),
                                   static_cast<std::uint8_t>(d));
            }
        }
        if (pd->oneshot) {
            if (pd->waiter[0].valid() || pd->waiter[1].valid()) {
                try {
                    arm_oneshot(pd);  // the other direction still waits
                } catch (...) {
                }
            } else if (pd->registered) {
                epoll_ctl(epfd_, EPOLL_CTL_DEL, pd->fd, nullptr);
                pd->registered = false;
            }
        }
    }
    // Driver-enqueues: the epoll thread goes straight to the shared queue
    // (+ one wake); a polling scheduler takes the actors itself.
    for (std::size_t i = 0; i < woken; ++i)
        rt_.unpark_at(pid{wake[i].index, wake[i].generation}, wake[i].epoch, caller);
    return woken;
}

}  // namespace smarm::internal
