#pragma once
// IO readiness: poll descriptors, fd waits, and the epoll producer (its
// thread and the schedulers' polls), plus the blocking pool it owns
// (blocking_pool.hpp) (DESIGN §5, seed RFC 018 "driver-enqueues").
//
// Design note
// -----------
// Both producers make actors runnable through the runtime's unpark_at, whose
// enqueue tail wakes one idle scheduler: no completion queue, no wake pipe.
// The termination verdict reads two counters: io_fd_waiters (actors parked
// on fd readiness: incremented under the poll descriptor's lock before the
// waiter parks, decremented by whoever removes the waiter: the epoll thread
// on readiness or the waiter itself on timeout/stop) and io_outstanding
// (blocking jobs: incremented before submit, decremented by the pool thread
// before it unparks). Neither can underflow: the increment always comes
// first.
//
// Poll descriptors (Go's pollDesc): a socket registers once, edge-triggered
// for both directions, on its first wait (the first EAGAIN; epoll_ctl ADD
// reports readiness the fd already has, so nothing between the EAGAIN and
// the ADD is lost), and keeps per direction a ready flag and at most one
// waiter (pid, epoch). A connection whose request is already there when it
// is accepted, answered and closed without waiting never enters the epoll
// set: one syscall (and the kernel's epoll item) fewer per short
// connection. An edge with no waiter sets the flag; a waiter that finds the
// flag consumes it and retries its syscall. epoll data carries (table index,
// generation), so an event that arrives after the descriptor was closed and
// its entry reused is recognised and dropped.
//
// Who calls epoll_wait: schedulers do (an idle one spins a few tens of µs
// polling every 2 µs; a busy one polls every 20 µs), so a woken actor runs on
// the thread that found its event. The epoll thread is the backstop: it
// blocks in epoll_wait only while every scheduler is parked, and otherwise
// rests on a futex (10 ms timeout, then one non-blocking harvest). A thread
// blocked in epoll_wait is woken by the kernel for every readiness event;
// with it always blocked, 64-connection echo spent ~25% of its CPU in those
// wakeups and ran at 0.74x Go. The last scheduler to park wakes it
// (scheduler_idle); the resting flag and the idle mask form a Dekker pair,
// and the futex sequence word closes the check-then-sleep window
// (tests/models/io_backstop.pml; its broken variant skips the hand-off).
//
// Oneshot mode (the seed's design, kept for raw fds and for measurement):
// each wait ADDs the fd with EPOLLONESHOT and DELs it when the wait ends,
// whoever ends it; two epoll_ctl calls per wait.
//
// Rejected: a shared completion queue drained by schedulers (a lock and a
// herd), level-triggered registration (an event per readable fd per
// epoll_wait).

#include <smarm/pid.hpp>

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/unique_function.hpp>

#include "blocking_pool.hpp"

#include "internal.hpp"

namespace smarm::internal {

class runtime_impl;
struct scheduler;

/// Per-fd readiness state. Guarded by mu except the immutable-while-live
/// identity fields.
struct poll_desc {
    spinlock mu;
    int fd = -1;                     // guarded by mu
    std::uint32_t gen = 0;           // guarded by mu; bumped on release
    bool live = false;               // guarded by mu
    bool oneshot = false;            // guarded by mu
    bool registered = false;         // guarded by mu: this descriptor's fd is in the epoll set
    bool ready[2] = {false, false};  // [0] read, [1] write
    // Sticky end-of-stream / error seen by epoll ([0] RDHUP|HUP|ERR, [1]
    // HUP|ERR). Edge-triggered epoll reports it once, possibly in the same
    // edge as the last data: a reader that drained that data must not wait
    // for another edge (the peer's FIN would be lost and the read hang).
    bool hup[2] = {false, false};
    pid waiter[2];  // guarded by mu
    std::uint32_t waiter_epoch[2] = {0, 0};
    std::uint32_t index = 0;  // immutable
};

class io_driver {
  public:
    io_driver(runtime_impl& rt, unsigned blocking_threads, bool persistent_sockets);
    ~io_driver();
    io_driver(const io_driver&) = delete;
    io_driver& operator=(const io_driver&) = delete;

    /// A descriptor for `fd`, not yet in the epoll set: it registers on its
    /// first wait (ready_or_register, which throws std::system_error naming
    /// the fd when epoll refuses it). Throws std::system_error (EMFILE) when
    /// the descriptor table is full.
    poll_desc* open(int fd, bool persistent);
    /// Deregisters, wakes any waiter (it sees the fd closed), frees the entry.
    /// `fd_closes_next`: the caller owns the fd and closes it right after,
    /// so the kernel drops the epoll registration itself and the
    /// EPOLL_CTL_DEL is skipped (a syscall per connection). Should a dup of
    /// the fd survive, its registration only yields events whose generation
    /// no longer matches, which poll() ignores.
    void close(poll_desc* pd, bool fd_closes_next = false) noexcept;

    /// Park the current actor until `pd` is ready in direction `dir`
    /// (0 read, 1 write) or `deadline` passes. Returns false on timeout.
    /// Throws std::logic_error when another actor already waits in that
    /// direction, std::system_error when epoll refuses the fd.
    bool wait(poll_desc* pd, int dir,
              std::optional<std::chrono::steady_clock::time_point> deadline);

    /// select() support: ready now (true) or waiter registered.
    bool ready_or_register(poll_desc* pd, int dir, pid self, std::uint32_t epoch);
    void unregister(poll_desc* pd, int dir, pid self, std::uint32_t epoch) noexcept;

    /// Called by a scheduler about to park, after its idle bit is published:
    /// if the epoll thread is resting, wake it so that, once every scheduler
    /// is parked, it blocks in epoll_wait for them.
    void scheduler_idle() noexcept;

    /// Non-blocking harvest of ready events by an idle scheduler (its idle
    /// spin): the woken actors go to `caller`'s wake slot / the queue.
    /// Returns how many actors it made runnable.
    std::size_t poll(scheduler* caller);

    /// Run `job` on a pool thread (io_outstanding already incremented).
    void submit(unique_function job) { pool_.submit(std::move(job)); }
    bool persistent_sockets() const noexcept { return persistent_; }

  private:
    /// The most events one dispatch takes (the epoll thread's batch).
    static constexpr int max_dispatch = 256;
    void epoll_loop();
    /// Hands the events' readiness to their descriptors and unparks the
    /// waiters (n <= max_dispatch).
    std::size_t dispatch(::epoll_event* evs, int n, scheduler* caller);
    poll_desc* lookup(std::uint64_t data) noexcept;
    void arm_oneshot(poll_desc* pd);                     // caller holds pd->mu
    void register_persistent(poll_desc* pd);             // caller holds pd->mu
    void clear_waiter(poll_desc* pd, int dir) noexcept;  // caller holds pd->mu

    runtime_impl& rt_;
    bool persistent_;  // immutable
    int epfd_ = -1;
    int shutdown_fd_ = -1;  // eventfd: only for stopping the epoll thread
    // Backstop protocol (see the design note): the epoll thread blocks in
    // epoll_wait only while every scheduler is parked; otherwise it rests on
    // this futex word (10 ms timeout) and schedulers poll epoll themselves.
    std::atomic<std::uint32_t> backstop_seq_{0};
    std::atomic<bool> backstop_resting_{false};
    std::atomic<bool> stopping_epoll_{false};
    std::thread epoll_thread_;

    static constexpr std::size_t chunk_bits = 10;
    static constexpr std::size_t chunk_size = std::size_t{1} << chunk_bits;
    static constexpr std::size_t max_chunks = 4096;  // 4M descriptors
    std::unique_ptr<std::atomic<poll_desc*>[]> chunks_;
    spinlock table_mu_;
    std::vector<std::uint32_t> free_;  // guarded by table_mu_
    std::uint32_t fresh_ = 0;          // guarded by table_mu_

    blocking_pool pool_;
};

}  // namespace smarm::internal
