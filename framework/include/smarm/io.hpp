#pragma once
// smarm IO: readiness waits on file descriptors, fd arms for select, and the
// blocking pool.
//
// Every wait here parks only the calling actor; the OS thread keeps running
// other actors. Readiness comes from the runtime's epoll thread, blocking
// jobs run on its pool (runtime_config::blocking_threads). Errors are
// std::system_error naming the fd or the operation; a timeout is a `false`
// return (or smarm::io_timeout where a value is expected).
//
// Thread safety: call from actors. A descriptor has at most one waiter per
// direction; a second one is a std::logic_error.

#include <smarm/pid.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/unique_function.hpp>
#include <smarm/detail/wait.hpp>

namespace smarm {

/// A deadline passed before an IO operation could complete.
class io_timeout : public std::system_error {
  public:
    explicit io_timeout(const std::string& what)
        : std::system_error(std::make_error_code(std::errc::timed_out), what) {}
};

enum class io_dir { read = 0, write = 1 };

namespace internal {
struct poll_desc;
class io_driver;
}  // namespace internal

namespace detail {
using internal::io_driver;
using internal::poll_desc;
io_driver& current_io(const char* call);
poll_desc* io_open(io_driver& d, int fd, bool persistent);
void io_close(io_driver& d, poll_desc* pd) noexcept;
bool io_wait(io_driver& d, poll_desc* pd, io_dir dir,
             std::optional<std::chrono::nanoseconds> timeout);
bool io_ready_or_register(io_driver& d, poll_desc* pd, io_dir dir, pid self, std::uint32_t epoch);
void io_unregister(io_driver& d, poll_desc* pd, io_dir dir, pid self, std::uint32_t epoch) noexcept;
bool io_persistent_sockets(io_driver& d) noexcept;
/// Increments io_outstanding, then queues `job` on the pool.
void io_submit(unique_function job);
/// A pool job is done: io_outstanding -= 1, then wake (waiter, epoch).
void io_job_finished(pid waiter, std::uint32_t epoch) noexcept;
/// The calling actor has its job's result: its wait on the world outside
/// is over (the causal profiler's IO rule, io_submit).
void io_job_collected() noexcept;

/// A select arm over a descriptor registration.
class fd_source final : public select_source {
  public:
    fd_source(io_driver& d, poll_desc* pd, io_dir dir) noexcept : d_(&d), pd_(pd), dir_(dir) {}
    bool ready_or_register(pid self, std::uint32_t epoch) override {
        return io_ready_or_register(*d_, pd_, dir_, self, epoch);
    }
    void unregister(pid self, std::uint32_t epoch) noexcept override {
        io_unregister(*d_, pd_, dir_, self, epoch);
    }

  private:
    io_driver* d_;
    poll_desc* pd_;
    io_dir dir_;
};
}  // namespace detail

/// Parks until `fd` is readable (or `timeout` passes: false). Uses a oneshot
/// registration that is removed when the wait ends, however it ends (a stop
/// included), so the fd is immediately waitable again.
bool wait_readable(int fd, std::optional<std::chrono::nanoseconds> timeout = std::nullopt);
/// Parks until `fd` is writable (or `timeout` passes: false).
bool wait_writable(int fd, std::optional<std::chrono::nanoseconds> timeout = std::nullopt);

/// A select arm that is ready when a raw fd is readable or writable. Holds a
/// oneshot registration only while a select waits on it (eager cleanup: a
/// losing or timed-out arm leaves nothing behind). Move-only; must not
/// outlive the run it was made in.
class fd_arm {
  public:
    fd_arm(int fd, io_dir dir);
    ~fd_arm();
    fd_arm(const fd_arm&) = delete;
    fd_arm& operator=(const fd_arm&) = delete;
    detail::select_source& select_source() noexcept { return src_; }

  private:
    internal::io_driver* d_;
    internal::poll_desc* pd_;
    detail::fd_source src_;
};

/// Runs `fn` on a blocking-pool thread and parks until it returns; gives
/// back its value or rethrows its exception here. For file IO, fsync, DNS,
/// long CPU-bound C calls. `fn` may refer to the caller's locals and
/// members: a stop requested meanwhile waits for the job to finish (it
/// cannot be interrupted) and is then thrown here, the job's result
/// dropped. (Unwinding at once freed what a running job still used: the
/// kv server stopped mid-append crashed the process.)
template <class F>
auto block_on_io(F&& fn) -> std::invoke_result_t<std::decay_t<F>&> {
    using result = std::invoke_result_t<std::decay_t<F>&>;
    static_assert(!std::is_reference_v<result>, "block_on_io: return a value, not a reference");
    struct state {
        detail::spinlock mu;
        bool done = false;  // guarded by mu
        pid waiter;         // guarded by mu
        std::uint32_t epoch = 0;
        std::conditional_t<std::is_void_v<result>, bool, std::optional<result>> value{};
        std::exception_ptr error;
    };
    (void)detail::current_pid("smarm::block_on_io");
    detail::observe();
    auto st = std::make_shared<state>();
    detail::io_submit([st, fn = std::forward<F>(fn)]() mutable {
        try {
            if constexpr (std::is_void_v<result>)
                fn();
            else
                st->value.emplace(fn());
        } catch (...) {
            st->error = std::current_exception();
        }
        pid w;
        std::uint32_t e = 0;
        {
            std::lock_guard g(st->mu);
            st->done = true;
            w = st->waiter;
            e = st->epoch;
        }
        detail::io_job_finished(w, e);
    });
    {
        // A stop wakes the park without throwing; the loop parks again
        // until the job is done.
        no_preempt hold;
        for (;;) {
            {
                std::lock_guard g(st->mu);
                if (st->done) break;
                auto w = detail::open_wait("smarm::block_on_io");
                st->waiter = w.self;
                st->epoch = w.epoch;
            }
            detail::park(detail::wait_reason::blocking);
        }
    }
    detail::io_job_collected();
    detail::observe();  // a stop requested meanwhile is thrown now
    if (st->error) std::rethrow_exception(st->error);
    if constexpr (!std::is_void_v<result>) return std::move(*st->value);
}

}  // namespace smarm
