// The timer service (timer_service.hpp): arming, deferred wakes, firing,
// the timekeeper role; the timer hooks of detail/wait.hpp and smarm::sleep.

#include "timer_service.hpp"

#include <smarm/detail/assert.hpp>
#include <smarm/detail/bump.hpp>

#include <cstdio>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#include "causal.hpp"
#include "observe.hpp"
#include "runtime_impl.hpp"
#include "scheduler.hpp"
#include "slot_table.hpp"
#include "trace_hooks.hpp"

namespace smarm::detail {

using namespace smarm::internal;

clock::time_point deadline_after(std::uint64_t at, std::chrono::nanoseconds d) noexcept {
    if (clock::overridden()) {  // `at` is the clock_source's time (wait_moment)
        const clock::time_point begun{clock::duration(static_cast<clock::rep>(at))};
        if (d >= clock::time_point::max() - begun) return clock::time_point::max();
        return begun + d;
    }
    const auto now = clock::now();
    const std::uint64_t t = ticks();
    const auto since = std::chrono::nanoseconds(
        t > at ? static_cast<std::int64_t>(static_cast<double>(t - at) / ticks_per_ns()) : 0);
    const auto begun = now - since;
    if (d >= clock::time_point::max() - begun) return clock::time_point::max();
    return begun + d;
}

}  // namespace smarm::detail

namespace smarm::internal {

timer_service::timer_service(runtime_impl& rt, coordinator& coord, slot_table& slots,
                             std::uint64_t due_check_ticks) noexcept
    : rt_(rt),
      coord_(coord),
      slots_(slots),
      due_check_ticks_(due_check_ticks),
      ns_per_tick_(1.0 / ticks_per_ns()) {}

void timer_service::publish_locked() noexcept {
    SMARM_ASSERT(mu_.is_held());
    pending_.store(heap_.size(), std::memory_order_release);
}

namespace {
timer_heap::anchor anchor_now(bool wall) noexcept {
    if (!causal_hooks::compiled_in) return {0, wall};
    return {causal_hooks::global_delay.load(std::memory_order_relaxed), wall};
}
}  // namespace

std::uint64_t timer_service::arm_wake(clock::time_point deadline, pid p, std::uint32_t epoch,
                                      bool wall) {
    const timer_heap::anchor a = anchor_now(wall);
    std::lock_guard g(mu_);
    const std::uint64_t id = heap_.insert_wake(deadline, p, epoch, a);
    publish_locked();
    coord_.note_deadline(deadline);
    return id;
}

std::uint64_t timer_service::arm_call(clock::time_point deadline, unique_function fn, bool wall) {
    const timer_heap::anchor a = anchor_now(wall);
    std::lock_guard g(mu_);
    const std::uint64_t id = heap_.insert_call(deadline, std::move(fn), a);
    publish_locked();
    coord_.note_deadline(deadline);
    return id;
}

bool timer_service::disarm(std::uint64_t id) noexcept {
    std::lock_guard g(mu_);
    const bool was = heap_.cancel(id);
    if (was) {
        publish_locked();
        coord_.refresh_deadline(heap_.peek());
    }
    return was;
}

void timer_service::clear() noexcept {
    std::lock_guard g(mu_);
    heap_.clear();
    publish_locked();
    coord_.refresh_deadline(std::nullopt);
}

void timer_service::defer_wake(local& loc, slot& sl, std::uint32_t gen, std::uint32_t epoch,
                               std::uint64_t at, std::chrono::nanoseconds d) noexcept {
    auto& w = sl.dwake;
    std::lock_guard g(w.mu);
    w.epoch = epoch;
    w.at = at;
    w.timeout = d.count();
    // Under a clock_source the wake is armed now: deferred, it could be
    // armed only after a test's advance() had already passed its deadline.
    if (loc.deferred.size() < loc.deferred.capacity() && !clock::overridden()) {
        w.st = slot::deferred_wake::state::deferred;
        loc.deferred.emplace_back(sl.index, gen);
        return;
    }
    // The list is full (hundreds of timed waits began in one loop turn):
    // arm now rather than allocate on the actor's stack. arm_wake throws
    // only when the heap cannot grow; the wait then has no timer.
    try {
        w.id = arm_wake(deadline_after(at, d), pid{sl.index, gen}, epoch);
        w.st = slot::deferred_wake::state::armed;
    } catch (...) {
        w.st = slot::deferred_wake::state::none;
    }
}

void timer_service::end_deferred_wake(slot& sl) noexcept {
    auto& w = sl.dwake;
    std::uint64_t id = 0;
    {
        std::lock_guard g(w.mu);
        if (w.st == slot::deferred_wake::state::armed) id = w.id;
        w.st = slot::deferred_wake::state::none;
    }
    if (id != 0) disarm(id);
}

void timer_service::arm_deferred(local& loc) {
    for (auto [idx, gen] : loc.deferred) {
        slot& sl = *slots_.at(idx);
        auto& w = sl.dwake;
        std::lock_guard g(w.mu);
        // A later wait of the same actor re-deferred: its own entry (here or
        // on another scheduler) or this one arms it, whichever comes first.
        if (w.st != slot::deferred_wake::state::deferred ||
            state_word::gen_of(sl.word.load()) != gen)
            continue;
        w.id = arm_wake(deadline_after(w.at, std::chrono::nanoseconds(w.timeout)), pid{idx, gen},
                        w.epoch);
        w.st = slot::deferred_wake::state::armed;
    }
    loc.deferred.clear();
}

std::optional<clock::time_point> timer_service::claim_timekeeper(unsigned sched_id) noexcept {
    std::lock_guard g(mu_);
    auto d = heap_.peek();
    if (d && coord_.try_arm_timer(sched_id, *d)) return d;
    return std::nullopt;
}

void timer_service::fire_due(scheduler& s, local& loc, bool try_only) {
    {
        std::unique_lock lk(mu_, std::defer_lock);
        if (try_only) {
            if (!lk.try_lock()) return;
        } else {
            lk.lock();
        }
        // relaxed: the ledger is a sum; a shift computed from a reading a
        // moment old is off by that moment's delay, then caught next pop.
        heap_.pop_due(clock::now(), loc.fired,
                      {causal_hooks::compiled_in
                           ? causal_hooks::global_delay.load(std::memory_order_relaxed)
                           : 0,
                       ns_per_tick_});
        publish_locked();
        coord_.refresh_deadline(heap_.peek());
        if (!loc.fired.empty()) firing_.fetch_add(1, std::memory_order_relaxed);
    }
    const std::size_t n = loc.fired.size();
    detail::bump(loc.fires, n);
    const bool single = n == 1;
    for (auto& f : loc.fired) {
        trace_hooks::event(trace_hooks::kind::timer,
                           f.call ? trace_hooks::no_pid : trace_hooks::word(f.target));
        if (f.call) {
            try {
                f.call();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "smarm: a timer callback threw: %s\n", e.what());
            } catch (...) {
                std::fprintf(stderr, "smarm: a timer callback threw a non-std exception\n");
            }
        } else {
            rt_.unpark_at(f.target, f.epoch, single ? &s : nullptr);
        }
    }
    if (n != 0) firing_.fetch_sub(1, std::memory_order_release);  // settled() acquires
    loc.fired.clear();
}

bool timer_service::settled() {
    std::lock_guard g(mu_);
    if (firing_.load(std::memory_order_acquire) != 0) return false;
    const auto next = heap_.peek();
    return !next || *next > clock::now();
}

}  // namespace smarm::internal

namespace smarm {

void clock_source::time_moved() const {
    detail::runtime_impl* rt = run_.load(std::memory_order_acquire);
    if (rt == nullptr) return;
    // Parked schedulers (the timekeeper among them) recheck the deadline.
    rt->wake_all_schedulers();
    internal::scheduler* s = internal::current_scheduler();
    if (s == nullptr || s->rt != rt) return;
    // From one of the run's actors: yield until nothing due is left, so the
    // caller sees every timer up to now() fired (the woken actors may not
    // have run yet; a receive from them does wait).
    while (!rt->timers().settled())
        yield_now();
}

void manual_clock::advance(std::chrono::nanoseconds d) {
    if (d < std::chrono::nanoseconds::zero())
        throw std::invalid_argument("smarm::manual_clock::advance: negative duration (" +
                                    std::to_string(d.count()) + " ns)");
    // release: pairs with now()'s acquire.
    ns_.fetch_add(d.count(), std::memory_order_release);
    time_moved();
}

void manual_clock::advance_to(time_point t) {
    std::int64_t cur = ns_.load(std::memory_order_relaxed);
    const std::int64_t want = t.time_since_epoch().count();
    while (cur < want && !ns_.compare_exchange_weak(cur, want, std::memory_order_release,
                                                    std::memory_order_relaxed)) {
    }
    time_moved();
}

}  // namespace smarm

// ---- the hooks of detail/wait.hpp ----

namespace smarm::detail {

using namespace smarm::internal;

std::uint64_t arm_wake_timer(clock::time_point deadline, pid p, std::uint32_t epoch) {
    return actor_scheduler("smarm timer").rt->timers().arm_wake(deadline, p, epoch);
}

std::uint64_t arm_call_timer(clock::time_point deadline, unique_function fire, bool wall) {
    runtime_impl* rt = active_runtime();
    if (rt == nullptr) throw std::logic_error("smarm::send_after: no runtime is running");
    return rt->timers().arm_call(deadline, std::move(fire), wall);
}

void defer_wake(std::uint32_t epoch, std::uint64_t at, std::chrono::nanoseconds d) noexcept {
    scheduler* s = current_scheduler();
    s->rt->timers().defer_wake(s->timers, *s->current, s->current_gen, epoch, at, d);
}

void end_deferred_wake() noexcept {
    scheduler* s = current_scheduler();
    s->rt->timers().end_deferred_wake(*s->current);
}

bool disarm_timer(std::uint64_t id) noexcept {
    runtime_impl* rt = active_runtime();
    return rt != nullptr && rt->timers().disarm(id);
}

}  // namespace smarm::detail

// ---- smarm::sleep (runtime.hpp) ----

namespace smarm {

namespace {

void sleep_until_anchored(std::chrono::steady_clock::time_point deadline, bool wall) {
    auto [s, sl] = internal::actor_or_throw(wall ? "smarm::sleep_wall" : "smarm::sleep");
    const pid me{sl->index, s->current_gen};
    internal::timer_service& timers = s->rt->timers();  // the actor's runtime, wherever it runs
    internal::observe_on(s);
    while (detail::clock::now() < deadline) {
        // The slot stays the actor's; only its scheduler may change.
        std::uint32_t epoch = sl->word.begin_wait();
        std::uint64_t id = timers.arm_wake(deadline, me, epoch, wall);
        try {
            detail::park(detail::wait_reason::timer);
        } catch (...) {
            timers.disarm(id);
            throw;
        }
        // Woken early only by a stop deferred under no_preempt: drop the
        // old timer and wait again.
        if (detail::clock::now() < deadline) timers.disarm(id);
    }
}

}  // namespace

void sleep_until(std::chrono::steady_clock::time_point deadline) {
    sleep_until_anchored(deadline, false);
}
void sleep(std::chrono::nanoseconds d) {
    sleep_until_anchored(detail::clock::now() + d, false);
}
void sleep_wall(std::chrono::nanoseconds d) {
    sleep_until_anchored(detail::clock::now() + d, true);
}

}  // namespace smarm
