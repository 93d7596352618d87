#pragma once
// smarm::runtime — the actor runtime: spawning, joining, sleeping, yielding,
// stopping, and the observation points where preemption and stops happen.
//
// Quick start:
//
//     smarm::run([] {
//         auto [tx, rx] = smarm::channel<int>();
//         auto child = smarm::spawn([rx = std::move(rx)] { std::cout << *rx.recv(); });
//         (void)tx.send(42);
//         child.join();
//     });
//
// Every call documented "parks" suspends only the calling actor (its
// scheduler thread runs other actors meanwhile); nothing here blocks an OS
// thread except runtime::run itself.

#include <smarm/config.hpp>
#include <smarm/pid.hpp>
#include <smarm/stats.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <smarm/detail/unique_function.hpp>

namespace smarm {

/// Thrown inside an actor at an observation point after request_stop().
/// Deliberately NOT derived from std::exception, so `catch (const
/// std::exception&)` in user code does not swallow it. If user code swallows
/// it with `catch (...)`, the next observation point throws it again. Never
/// thrown while the actor is already unwinding another exception.
struct stopped {};

/// Thrown by spawn() when no actor can be created (slot table full, stack
/// allocation or guard page refused); the message names the limit.
class spawn_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// How an actor ended.
enum class exit_kind {
    exit,     ///< its function returned
    panic,    ///< an exception escaped it (see outcome::error)
    stopped,  ///< it was stopped (smarm::stopped escaped it)
};

/// The result of join(): how the actor ended, and the escaped exception.
struct outcome {
    exit_kind kind = exit_kind::exit;
    std::exception_ptr error;  ///< set for exit_kind::panic

    bool ok() const noexcept { return kind == exit_kind::exit; }
    /// Rethrows the escaped exception of a panicked actor; no-op otherwise.
    void rethrow_if_panic() const {
        if (kind == exit_kind::panic && error) std::rethrow_exception(error);
    }
};

namespace internal {
class runtime_impl;
struct slot;
}  // namespace internal

namespace detail {
using internal::runtime_impl;
struct task_vtable {
    void (*invoke)(void*);
    void (*destroy)(void*) noexcept;
};
template <class F>
inline constexpr task_vtable task_vtable_for{
    [](void* p) { (*static_cast<F*>(p))(); },
    [](void* p) noexcept { static_cast<F*>(p)->~F(); },
};
/// A reserved slot and stack with room for the task object on the stack.
struct spawn_reservation {
    void* storage = nullptr;  ///< where the task object is to be constructed
    internal::slot* slot = nullptr;
    runtime_impl* rt = nullptr;
    pid id;
};
spawn_reservation spawn_reserve(std::size_t size, std::size_t align, const task_vtable* vt);
void spawn_abandon(spawn_reservation& r) noexcept;
void spawn_commit(spawn_reservation& r) noexcept;
void release_handle(runtime_impl* rt, pid p) noexcept;
outcome join_actor(runtime_impl* rt, pid p);
}  // namespace detail

/// Owns an actor's outcome until joined. Move-only. Destroying an unjoined
/// handle detaches the actor (it keeps running; its outcome is dropped).
///
/// Thread safety: one handle is used by one actor at a time.
class join_handle {
  public:
    join_handle() = default;
    join_handle(pid p, internal::runtime_impl* rt) noexcept : pid_(p), rt_(rt) {}
    join_handle(join_handle&& o) noexcept : pid_(std::exchange(o.pid_, pid{})), rt_(o.rt_) {}
    join_handle& operator=(join_handle&& o) noexcept {
        if (this != &o) {
            detach();
            pid_ = std::exchange(o.pid_, pid{});
            rt_ = o.rt_;
        }
        return *this;
    }
    join_handle(const join_handle&) = delete;
    join_handle& operator=(const join_handle&) = delete;
    ~join_handle() { detach(); }

    /// The actor's pid.
    smarm::pid id() const noexcept { return pid_; }
    bool joinable() const noexcept { return pid_.valid(); }

    /// Parks the calling actor until the actor ends and returns its outcome.
    /// The handle is empty afterwards. Throws std::logic_error for an empty
    /// handle or when called outside an actor.
    outcome join() {
        if (!pid_.valid()) throw std::logic_error("smarm::join_handle::join: empty handle");
        outcome o = detail::join_actor(rt_, pid_);
        detach();
        return o;
    }
    /// Gives up the outcome; the actor keeps running.
    void detach() noexcept {
        if (pid_.valid()) detail::release_handle(rt_, std::exchange(pid_, pid{}));
    }

  private:
    smarm::pid pid_;
    internal::runtime_impl* rt_ = nullptr;
};

/// An actor runtime: a slot table, a pool of stacks, N scheduler threads.
///
/// run() may be called any number of times, one at a time. Thread safety:
/// the object itself is not for concurrent use; actors reach the running
/// runtime through the free functions below.
class runtime {
  public:
    /// Validates `cfg` (std::invalid_argument names the field and value) and
    /// checks the guard-page budget against vm.max_map_count (see README).
    explicit runtime(runtime_config cfg = {});
    ~runtime();
    runtime(const runtime&) = delete;
    runtime& operator=(const runtime&) = delete;

    /// Runs `root` as the first actor on the calling thread (scheduler 0)
    /// plus schedulers-1 new threads, and returns when every actor has
    /// ended. When the root ends, actors still parked forever are stopped
    /// once. An exception escaping the root is rethrown here after
    /// teardown, so the runtime can run again.
    void run(detail::unique_function root);

    /// The validated configuration (schedulers resolved to a number).
    const runtime_config& config() const noexcept;
    /// Counters of the last or current run.
    runtime_stats stats() const;

  private:
    std::unique_ptr<internal::runtime_impl> impl_;
};

/// Runs `root` on a runtime with the default configuration.
void run(detail::unique_function root, runtime_config cfg = {});

/// Spawns `f` (a callable taking no arguments) as a new actor, queued to run
/// soon on the caller's scheduler. The callable is stored on the new actor's
/// stack. Observation point. Throws spawn_error when no actor can be
/// created, std::logic_error outside an actor.
template <class F>
join_handle spawn(F&& f) {
    using task = std::decay_t<F>;
    static_assert(std::is_invocable_v<task&>, "smarm::spawn needs a callable taking no arguments");
    auto r = detail::spawn_reserve(sizeof(task), alignof(task), &detail::task_vtable_for<task>);
    try {
        ::new (r.storage) task(std::forward<F>(f));
    } catch (...) {
        detail::spawn_abandon(r);
        throw;
    }
    detail::spawn_commit(r);
    return join_handle(r.id, r.rt);
}

/// The calling actor's pid. Throws std::logic_error outside an actor.
pid self_pid();
/// Lets other runnable actors run; the caller is requeued. Observation point.
void yield_now();
/// Parks the calling actor for at least `d` (nanosecond precision).
void sleep(std::chrono::nanoseconds d);
/// Parks until `deadline`.
void sleep_until(std::chrono::steady_clock::time_point deadline);
/// Like sleep(), anchored to wall time: unaffected by causal-profiling
/// virtual speedups (identical to sleep() while no experiment runs).
void sleep_wall(std::chrono::nanoseconds d);
/// Asks actor `p` to stop: it throws smarm::stopped at its next observation
/// point (a parked actor is woken for it). Returns false when `p` is not a
/// live actor (stale pid, finished). Callable from any thread.
bool request_stop(pid p) noexcept;
/// Observation point for hot loops: yields when the timeslice is spent and
/// throws smarm::stopped when a stop is pending. A no-op outside actors.
/// Cheap: the clock is read only every few calls (runtime_config,
/// "Preemption precision").
void check();
/// Is the calling code running inside an actor?
bool in_actor() noexcept;

/// RAII region in which observation points neither yield nor throw
/// smarm::stopped (both happen at the first observation point after it
/// ends). For code that holds an OS-level lock; keep it short. Nests.
class no_preempt {
  public:
    no_preempt() noexcept;
    ~no_preempt();
    no_preempt(const no_preempt&) = delete;
    no_preempt& operator=(const no_preempt&) = delete;

  private:
    internal::slot* slot_;
};

}  // namespace smarm

/// An observation point for hot loops (see smarm::check()).
#define SMARM_CHECK() ::smarm::check()
