#include "runtime_impl.hpp"

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/wait.hpp>
#include <smarm/runtime.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include <sched.h>
#if SMARM_ASAN
#include <sanitizer/asan_interface.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "fiber.hpp"

namespace smarm::detail {

// ---------------------------------------------------------------------------
// thread-locals, ticks
// ---------------------------------------------------------------------------

constinit thread_local scheduler* tl_sched = nullptr;

namespace {
// The most recently started runtime: lets foreign threads (and pre-run
// code) reach it for request_stop and friends.
std::atomic<runtime_impl*> g_active{nullptr};

constexpr std::size_t map_count_reserve = 16384;

unsigned usable_cpus() noexcept {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return static_cast<unsigned>(CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

// noipa: a thread_local read must never be cached across a context switch
// (see entry_scheduler for the one exception).
SMARM_OPAQUE_CALL scheduler* current_scheduler() noexcept {
    return tl_sched;
}

runtime_impl* active_runtime() noexcept {
    if (scheduler* s = current_scheduler()) return s->rt;
    return g_active.load(std::memory_order_acquire);
}

scheduler& actor_scheduler(const char* call) {
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr)
        throw std::logic_error(std::string(call) +
                               ": called outside an actor (only code running "
                               "inside smarm::run may call it)");
    return *s;
}

runtime_impl& running_runtime(const char* call) {
    runtime_impl* rt = active_runtime();
    if (rt == nullptr) throw std::logic_error(std::string(call) + ": no smarm runtime is running");
    return *rt;
}

namespace {
struct actor_ctx {
    scheduler* s;
    slot* sl;
};
actor_ctx actor_or_throw(const char* call) {
    scheduler& s = actor_scheduler(call);
    return {&s, s.current};
}
bool may_throw_stop(slot& sl, std::uint32_t gen) noexcept {
    return sl.no_preempt == 0 && sl.stop_pending(gen) && std::uncaught_exceptions() == 0;
}

scheduler* observe_clock(scheduler* s, slot& sl);

// The observation point for the actor running on `s`; returns the scheduler
// running it afterwards (another one if it yielded and migrated). Inline:
// the message path passes here twice per message.
[[gnu::always_inline]] inline scheduler* observe_on(scheduler* s) {
    if (s == nullptr || s->current == nullptr) return s;
    slot& sl = *s->current;
    if (sl.no_preempt != 0) return s;
    if (may_throw_stop(sl, s->current_gen)) [[unlikely]]
        throw stopped{};
    // The clock is read at every obs_period-th observation point only
    // (adapt_obs_period): a spent slice is noticed about a 32nd of a slice
    // late at most, for actors whose observation points keep a steady pace.
    if (--s->obs_left != 0) [[likely]]
        return s;
    return observe_clock(s, sl);
}

// Sets how many observation points pass before the next clock read, so that
// reads come about every 32nd of a slice: a clock read (rdtsc, ~10 ns on the
// VMs measured) every 8th observation point was ~5% of a message ping-pong,
// while an actor that observes only every few hundred microseconds overran
// its slice by 8 of those gaps. The window just measured (`took` ticks over
// s.obs_period points) doubles the period when it was shorter than a 64th of
// a slice (up to obs_period_max) and shrinks it to the measured pace when it
// was longer than a 16th. The result is kept in the actor's slot, so a fresh
// slice starts from what suits the actor it runs. Within a slice handed on
// by direct switches the actors share one count, cut short by any actor
// entered whose own period is shorter (scheduler::obs_enter); a chatty
// window credits that actor too, or in a ping-pong whose reads always land
// on the same side the other side's period would never grow back.
void adapt_obs_period(scheduler& s, slot& sl, std::uint64_t now) noexcept {
    const std::uint64_t took = now - s.obs_mark;
    const std::uint64_t slice = s.rt->slice_ticks();
    std::uint32_t p = s.obs_period;
    if (took < slice / 64) {
        p = std::min<std::uint32_t>(p * 2, obs_period_max);
        if (s.obs_capper != nullptr)
            s.obs_capper->obs_period.store(static_cast<std::uint8_t>(p), std::memory_order_relaxed);
    } else if (took > slice / 16) {
        const std::uint64_t per_point = std::max<std::uint64_t>(took / p, 1);
        p = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(slice / 32 / per_point, 1, p));
    }
    s.obs_capper = nullptr;
    s.obs_mark = now;
    s.obs_period = p;
    s.obs_left = p;
    sl.obs_period.store(static_cast<std::uint8_t>(p), std::memory_order_relaxed);
}

// observe_on's clock read: yields when the slice is spent.
[[gnu::noinline]] scheduler* observe_clock(scheduler* s, slot& sl) {
    const std::uint64_t now = ticks();
    adapt_obs_period(*s, sl, now);
    if (now < s->slice_end) return s;
    if (now - s->slice_end >= s->rt->slice_ticks()) {
        bump(s->overruns);
        bump(sl.overruns);
    }
    bump(s->yields);
    fiber_suspend(switch_reason::yield);
    throw_if_stopped();
    return current_scheduler();
}
}  // namespace

std::uint64_t ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(clock::now().time_since_epoch().count());
#endif
}

double ticks_per_ns() noexcept {
    static const double v = [] {
#if defined(__x86_64__) || defined(__i386__)
        auto t0 = clock::now();
        std::uint64_t c0 = ticks();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        auto t1 = clock::now();
        std::uint64_t c1 = ticks();
        double ns = static_cast<double>(std::chrono::nanoseconds(t1 - t0).count());
        double r = static_cast<double>(c1 - c0) / ns;
        return r > 0.01 ? r : 1.0;
#else
        return 1.0;
#endif
    }();
    return v;
}

const char* to_string(actor_state s) noexcept {
    switch (s) {
        case actor_state::vacant:
            return "vacant";
        case actor_state::queued:
            return "queued";
        case actor_state::running:
            return "running";
        case actor_state::running_notified:
            return "running_notified";
        case actor_state::parked:
            return "parked";
        case actor_state::done:
            return "done";
    }
    return "?";
}

// ---------------------------------------------------------------------------
// construction and validation
// ---------------------------------------------------------------------------

namespace {
runtime_config validate(runtime_config c) {
    if (c.schedulers == 0) c.schedulers = std::clamp(std::thread::hardware_concurrency(), 1u, 64u);
    if (c.schedulers > 64)
        throw std::invalid_argument(
            "smarm::runtime_config.schedulers = " + std::to_string(c.schedulers) +
            ": must be 1..64 (or 0 for the hardware thread count)");
    if (c.max_actors < 1 || c.max_actors > (std::size_t{1} << 28))
        throw std::invalid_argument("smarm::runtime_config.max_actors = " +
                                    std::to_string(c.max_actors) + ": must be 1..268435456");
    if (c.stack_size < 16 * 1024 || c.stack_size > (std::size_t{1} << 30))
        throw std::invalid_argument(
            "smarm::runtime_config.stack_size = " + std::to_string(c.stack_size) +
            ": must be 16384..1073741824 bytes");
    if (c.idle_spin < std::chrono::nanoseconds::zero() ||
        c.idle_spin > std::chrono::milliseconds(10))
        throw std::invalid_argument("smarm::runtime_config.idle_spin = " +
                                    std::to_string(c.idle_spin.count()) + "ns: must be 0..10ms");
    if (c.blocking_threads < 1 || c.blocking_threads > 1024)
        throw std::invalid_argument("smarm::runtime_config.blocking_threads = " +
                                    std::to_string(c.blocking_threads) + ": must be 1..1024");
    if (c.timeslice < std::chrono::microseconds(10) || c.timeslice > std::chrono::seconds(10))
        throw std::invalid_argument("smarm::runtime_config.timeslice = " +
                                    std::to_string(c.timeslice.count()) + "ns: must be 10us..10s");
    return c;
}

std::size_t guarded_stack_budget(const runtime_config& c) {
    if (!c.guard_pages) return 0;
    std::size_t want = c.max_actors * 2 + map_count_reserve;
    std::size_t have = raise_max_map_count(want);
    if (have == 0 || have >= want) return 0;  // unknown kernel limit, or enough
    std::size_t budget = have > 2 * map_count_reserve ? (have - map_count_reserve) / 2 : 1024;
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
        std::fprintf(stderr,
                     "smarm: WARNING: vm.max_map_count=%zu allows only %zu guarded actor stacks "
                     "(max_actors=%zu needs %zu); spawns past %zu will fail with spawn_error. "
                     "Raise it with `sysctl -w vm.max_map_count=%zu` (README: Deployment).\n",
                     have, budget, c.max_actors, want, budget, want);
    return budget;
}
}  // namespace

runtime_impl::runtime_impl(runtime_config cfg)
    : cfg_(validate(cfg)),
      slice_ticks_(
          static_cast<std::uint64_t>(static_cast<double>(cfg_.timeslice.count()) * ticks_per_ns())),
      spin_ticks_(
          static_cast<std::uint64_t>(static_cast<double>(cfg_.idle_spin.count()) * ticks_per_ns())),
      poll_ticks_(static_cast<std::uint64_t>(2000.0 * ticks_per_ns())),
      busy_poll_ticks_(static_cast<std::uint64_t>(20000.0 * ticks_per_ns())),
      due_check_ticks_(static_cast<std::uint64_t>(1000.0 * ticks_per_ns())),
      slots_(cfg_.max_actors),
      queue_(cfg_.max_actors),
      coord_(cfg_.schedulers, usable_cpus()),
      stacks_(cfg_.stack_size, cfg_.guard_pages, guarded_stack_budget(cfg_)),
      scheds_(std::make_unique<scheduler[]>(cfg_.schedulers)) {
    for (unsigned i = 0; i < cfg_.schedulers; ++i) {
        scheds_[i].rt = this;
        scheds_[i].id = i;
    }
}

runtime_impl::~runtime_impl() {
    runtime_impl* self = this;
    g_active.compare_exchange_strong(self, nullptr);
    for (unsigned i = 0; i < cfg_.schedulers; ++i)
        for (auto& st : scheds_[i].stack_cache)
            stacks_.release(st);
}

// ---------------------------------------------------------------------------
// run
// ---------------------------------------------------------------------------

void runtime_impl::run(unique_function root) {
    if (current_scheduler() != nullptr)
        throw std::logic_error("smarm::runtime::run: called from inside an actor");
    bool expected = false;
    if (!running_.compare_exchange_strong(expected, true))
        throw std::logic_error("smarm::runtime::run: this runtime is already running");
    g_active.store(this, std::memory_order_release);
    try {
        io_ = std::make_unique<io_driver>(*this, cfg_.blocking_threads,
                                          cfg_.sockets == socket_registration::persistent);
    } catch (...) {
        running_.store(false);
        throw;
    }
    root_exited_.store(false);
    root_swept_.store(false);
    for (unsigned i = 0; i < cfg_.schedulers; ++i) {
        scheduler& s = scheds_[i];
        for (auto* c :
             {&s.pops, &s.parks, &s.wakes, &s.yields, &s.overruns, &s.timer_fires, &s.spawns})
            c->store(0, std::memory_order_relaxed);
    }

    using root_task = unique_function;
    spawn_reservation r;
    try {
        r = reserve(sizeof(root_task), alignof(root_task), &task_vtable_for<root_task>, nullptr);
    } catch (...) {
        io_.reset();
        running_.store(false);
        throw;
    }
    ::new (r.storage) root_task(std::move(root));
    root_ = r.id;
    commit(r, pid{}, nullptr);  // refs = 2: the run() call holds the root's handle

    std::vector<std::thread> threads;
    threads.reserve(cfg_.schedulers - 1);
    for (unsigned i = 1; i < cfg_.schedulers; ++i) {
        threads.emplace_back([this, i] {
            std::string name = "smarm-sched-" + std::to_string(i);
            pthread_setname_np(pthread_self(), name.c_str());
            schedule_loop(scheds_[i]);
        });
    }
    schedule_loop(scheds_[0]);
    for (auto& t : threads)
        t.join();

    // The root's outcome, read before its handle is dropped (the handle pins
    // the slot). Rethrown last, after teardown, so the runtime is reusable.
    outcome root_outcome;
    if (slot* sl = slots_.at(root_.index)) {
        std::lock_guard g(sl->cold_mu);
        root_outcome.kind = sl->end_kind();
        root_outcome.error = sl->end_error;
    }
    release_handle(root_);
    names_.clear();  // bindings hold senders: drop them with the run
    groups_.clear();
    io_.reset();  // joins the epoll thread and the pool (all idle by now)
    {
        std::lock_guard g(timers_mu_);
        timers_.clear();
        timers_pending_.store(0, std::memory_order_relaxed);
        coord_.refresh_deadline(std::nullopt);
    }
    for (unsigned i = 0; i < cfg_.schedulers; ++i) {
        for (auto& st : scheds_[i].stack_cache)
            stacks_.release(st);
        scheds_[i].stack_cache.clear();
        slots_.release_batch(scheds_[i].slot_cache, 0);
    }
    io_outstanding.store(0);
    io_fd_waiters.store(0);
    running_.store(false);
    if (root_outcome.kind == exit_kind::panic && root_outcome.error)
        std::rethrow_exception(root_outcome.error);
}

// ---------------------------------------------------------------------------
// scheduler loop
// ---------------------------------------------------------------------------

bool runtime_impl::nothing_can_wake() const noexcept {
    return timers_pending_.load(std::memory_order_acquire) == 0 &&
           io_outstanding.load(std::memory_order_acquire) == 0 &&
           io_fd_waiters.load(std::memory_order_acquire) == 0;
}

void runtime_impl::schedule_loop(scheduler& s) {
    tl_sched = &s;
    fiber_thread_init(s);
    s.deferred.reserve(256);
    for (;;) {
        // (0) wake timers deferred by the actors that ran last turn.
        if (!s.deferred.empty()) arm_deferred(s);
        // (1) busy-path due-check: one relaxed load unless a timer exists,
        // then at most once a microsecond (a loaded server always has some
        // timer, and reading the clock on every turn cost ~3% of its CPU).
        if (coord_.has_deadline()) {
            const std::uint64_t now = ticks();
            if (now >= s.next_due_check) {
                s.next_due_check = now + due_check_ticks_;
                if (coord_.deadline_due()) fire_due_timers(s, true);
            }
        }

        // (2) pop: own wake slot first, then the shared queue.
        slot* next = nullptr;
        bool from_wake_slot = false;
        if (s.wake_slot != nullptr) {
            next = std::exchange(s.wake_slot, nullptr);
            from_wake_slot = true;
        } else {
            // IO liveness is read before the pop: a completion makes its
            // actor runnable through an enqueue the pop below would see.
            std::uint32_t io = io_outstanding.load(std::memory_order_acquire) +
                               io_fd_waiters.load(std::memory_order_acquire);
            // Busy-path netpoll: with actors waiting on sockets, harvest
            // ready events here every poll period rather than leaving them
            // to the epoll thread, which would need a CPU of its own.
            if (io != 0 && io_fd_waiters.load(std::memory_order_relaxed) != 0) {
                const std::uint64_t now = ticks();
                if (now >= s.next_poll) {
                    s.next_poll = now + busy_poll_ticks_;
                    if (io_->poll(&s) != 0 && s.wake_slot != nullptr) continue;
                }
            }
            std::uint32_t idx;
            if (!queue_.pop(idx)) {
                if (live_.load(std::memory_order_acquire) == 0 && io == 0) {
                    // Terminal: orphaned timers must not keep anyone alive,
                    // and every sibling must come out of its park.
                    {
                        std::lock_guard g(timers_mu_);
                        timers_.clear();
                        timers_pending_.store(0, std::memory_order_release);
                        coord_.refresh_deadline(std::nullopt);
                    }
                    coord_.wake_all();
                    break;
                }
                if (root_exited_.load(std::memory_order_acquire) &&
                    !root_swept_.load(std::memory_order_acquire) && nothing_can_wake()) {
                    if (!root_swept_.exchange(true)) stop_all_live();
                    continue;
                }
                // Idle. Spin briefly first: work from the IO thread, the pool
                // or a sibling often lands within microseconds, and picking
                // it up here saves a futex sleep + wake on both sides. The
                // idle bit is not published while spinning, so producers
                // count us as awake and leave the work to us.
                // While spinning it also polls epoll (without blocking), so a
                // reply to the actor that just parked on a socket is taken
                // here instead of through the epoll thread and a futex wake
                // (Go's idle-P netpoll; the two-thread hop cost ~100 us per
                // round trip on a 2-vCPU VM).
                if (spin_ticks_ != 0 && !s.spun) {
                    s.spun = true;
                    if (s.spin_budget == 0) s.spin_budget = spin_ticks_;
                    const std::uint64_t until = ticks() + s.spin_budget;
                    std::uint64_t next_poll = 0;
                    bool found = false;
                    for (;;) {
                        if (!queue_.empty() || s.wake_slot != nullptr) {
                            found = true;
                            break;
                        }
                        const std::uint64_t now = ticks();
                        if (now >= until) break;
                        // The clock and epoll are read every poll period, not
                        // every iteration (clock_gettime was 6% of a busy
                        // server's CPU when read on every turn).
                        if (now >= next_poll) {
                            next_poll = now + poll_ticks_;
                            if (coord_.deadline_due()) {
                                found = true;
                                break;
                            }
                            if (io_fd_waiters.load(std::memory_order_relaxed) != 0 &&
                                io_->poll(&s) != 0) {
                                found = true;
                                break;
                            }
                        }
                        cpu_relax();
                    }
                    s.spin_budget = found ? std::min(s.spin_budget * 2, spin_ticks_)
                                          : std::max(s.spin_budget / 2, spin_ticks_ / 32);
                    continue;
                }
                s.spun = false;
                // Park, as timekeeper if the role is free.
                std::optional<clock::time_point> tk;
                {
                    std::lock_guard g(timers_mu_);
                    auto d = timers_.peek();
                    if (d && coord_.try_arm_timer(s.id, *d)) tk = d;
                }
                bump(s.parks);
                park_result r = coord_.park(s.id, tk, [&] {
                    // Our idle bit is published: if we are the last one, the
                    // epoll thread must take over blocking in epoll_wait.
                    io_->scheduler_idle();
                    return !queue_.empty() ||
                           (live_.load(std::memory_order_seq_cst) == 0 &&
                            io_outstanding.load(std::memory_order_seq_cst) == 0 &&
                            io_fd_waiters.load(std::memory_order_seq_cst) == 0) ||
                           (root_exited_.load(std::memory_order_seq_cst) &&
                            !root_swept_.load(std::memory_order_seq_cst) && nothing_can_wake()) ||
                           coord_.deadline_due();
                });
                if (r != park_result::work_found) bump(s.wakes);
                if (tk) {
                    // Hand the role back before firing: fired thunks may
                    // insert timers, whose insert check must not target us.
                    coord_.disarm_timer(s.id);
                    fire_due_timers(s, false);
                }
                continue;
            }
            next = slots_.at(idx);
        }
        s.spun = false;
        s.direct_left = scheduler::direct_period;
        // (3) chain rule: surplus work and an idle sibling => wake one.
        if (!queue_.empty()) coord_.wake_one_if_idle();
        // (4) run it (and whoever it hands the CPU to).
        while (next != nullptr) {
            next = resume(s, *next, from_wake_slot);
            from_wake_slot = true;
        }
    }
    tl_sched = nullptr;
}

slot* runtime_impl::resume(scheduler& s, slot& sl, bool from_wake_slot) {
    // A wake-slot actor inherits the running slice (see the design note); if
    // that slice is spent, its first observation point yields.
    if (!from_wake_slot) {
        const std::uint64_t now = ticks();
        s.slice_end = now + slice_ticks_;
        s.obs_mark = now;
        s.obs_period = s.obs_left = sl.obs_period.load(std::memory_order_relaxed);
        s.obs_capper = nullptr;
    }
    make_current(s, sl);
    switch_reason why = fiber_resume(s, sl);
    // The actor that came back: `sl`, or one it switched to directly.
    slot& back = *s.current;
    s.current = nullptr;
    switch (why) {
        case switch_reason::yield:
            back.word.yield_return();
            // Yielders go behind everyone else, never into the wake slot.
            enqueue_shared(back.index);
            break;
        case switch_reason::park:
            // RunningNotified => the wake raced the park: requeue at once.
            if (!back.word.park_return()) enqueue_from(&s, back);
            break;
        case switch_reason::finish:
            finalize(s, back);
            break;
        case switch_reason::handoff:
            // The spawner yields to its new child, which sits in the wake
            // slot; the spawner takes the child's place there.
            back.word.yield_return();
            return std::exchange(s.wake_slot, &back);
    }
    return nullptr;
}

void runtime_impl::direct_switch_done_slow(scheduler& s, slot& from, switch_reason why) noexcept {
    switch (why) {
        case switch_reason::handoff:
            // The spawner takes its child's place in the (now empty) wake slot.
            from.word.yield_return();
            enqueue_from(&s, from);
            break;
        case switch_reason::finish: {
            slot& running = *s.current;
            ++running.no_preempt;
            finalize(s, from);
            --running.no_preempt;
            break;
        }
        case switch_reason::park:   // inline (direct_switch_done)
        case switch_reason::yield:  // never direct
            break;
    }
}

void runtime_impl::enqueue(slot& sl) noexcept {
    enqueue_from(current_scheduler(), sl);
}

void runtime_impl::enqueue_shared(std::uint32_t idx) noexcept {
    queue_.push(idx);
    coord_.wake_one_if_idle();
}

bool runtime_impl::request_stop(pid p) noexcept {
    slot* sl = slots_.at(p.index);
    if (sl == nullptr || !sl->holds(p)) return false;
    // Keyed by generation: if the slot was re-tenanted meanwhile, the flag
    // does not match the new tenant and the wake below fails its gen check.
    sl->stop_for.store((std::uint64_t{1} << 32) | p.generation, std::memory_order_release);
    if (sl->word.stop_wake(p.generation)) enqueue(*sl);
    return true;
}

void runtime_impl::stop_all_live() noexcept {
    const std::size_t n = slots_.high_water();
    for (std::size_t i = 0; i < n; ++i) {
        slot* sl = slots_.at(static_cast<std::uint32_t>(i));
        std::uint64_t w = sl->word.load();
        auto st = state_word::state_of(w);
        if (st != actor_state::vacant && st != actor_state::done)
            request_stop(pid{static_cast<std::uint32_t>(i), state_word::gen_of(w)});
    }
}

// ---------------------------------------------------------------------------
// spawn, finish, join
// ---------------------------------------------------------------------------

spawn_reservation runtime_impl::reserve(std::size_t size, std::size_t align, const task_vtable* vt,
                                        scheduler* on) {
    slot* sl = nullptr;
    if (on != nullptr) {
        if (on->slot_cache.empty()) slots_.allocate_batch(on->slot_cache, 32);
        if (!on->slot_cache.empty()) {
            sl = slots_.at(on->slot_cache.back());
            on->slot_cache.pop_back();
        }
    } else {
        sl = slots_.allocate();
    }
    if (sl == nullptr)
        throw spawn_error("smarm::spawn: the slot table is full (runtime_config.max_actors = " +
                          std::to_string(cfg_.max_actors) + " live actors)");
    stack_mem st;
    if (on != nullptr && !on->stack_cache.empty()) {
        st = on->stack_cache.back();
        on->stack_cache.pop_back();
    } else {
        try {
            st = stacks_.acquire();
        } catch (...) {
            slots_.release(sl->index);
            throw;
        }
    }
#if SMARM_ASAN
    // A reused stack (pool or scheduler cache) still carries the shadow
    // poison of its last actor's frames: a finished actor switches away
    // without returning through them. The task placed at the top would read
    // as an overflow (seen once a supervisor's child closure grew).
    ASAN_UNPOISON_MEMORY_REGION(st.bottom(), st.usable());
#endif
    // The task object lives at the top of the new stack; the fiber's frames
    // start just below it.
    std::size_t a = std::max<std::size_t>(align, 16);
    auto top = reinterpret_cast<std::uintptr_t>(st.top());
    std::uintptr_t storage = (top - size) & ~(std::uintptr_t{a} - 1);
    if (size > st.usable() / 4) {
        stacks_.release(st);
        slots_.release(sl->index);
        throw spawn_error("smarm::spawn: the task object (" + std::to_string(size) +
                          " bytes) exceeds a quarter of the actor stack (" +
                          std::to_string(st.usable()) + " bytes); capture less by value");
    }
    sl->stack = st;
    sl->vt = vt;
    spawn_reservation r;
    r.storage = reinterpret_cast<void*>(storage);
    r.slot = sl;
    r.rt = this;
    r.id = pid{sl->index, state_word::gen_of(sl->word.load())};
    return r;
}

void runtime_impl::abandon(spawn_reservation& r) noexcept {
    auto* sl = static_cast<slot*>(r.slot);
    stacks_.release(sl->stack);
    sl->stack = stack_mem{};
    slots_.release(sl->index);
}

void runtime_impl::commit(spawn_reservation& r, pid parent, scheduler* caller) noexcept {
    auto* sl = static_cast<slot*>(r.slot);
    sl->task = r.storage;
    fiber_init(*sl, reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(r.storage) &
                                            ~std::uintptr_t{15}));
    sl->stop_for.store(0, std::memory_order_relaxed);
    sl->refs.store(2, std::memory_order_relaxed);  // alive + the handle
    sl->overruns.store(0, std::memory_order_relaxed);
    sl->messages.store(0, std::memory_order_relaxed);
    sl->no_preempt = 0;
    sl->pg_member = false;
    sl->set_end_kind(exit_kind::exit);
    sl->obs_period.store(obs_period_initial, std::memory_order_relaxed);
    sl->end_error = nullptr;
    // No cold lock: nobody looks at the slot before word.spawn() publishes it
    // (release); introspection reads `parent` only after seeing it live.
    sl->parent = parent;
    live_.fetch_add(1, std::memory_order_acq_rel);  // before the enqueue (verdict)
    bump((caller != nullptr && caller->rt == this ? *caller : scheds_[0]).spawns);
    sl->word.spawn(r.id.generation);
    enqueue_from(caller, *sl);
}

void runtime_impl::finalize(scheduler& s, slot& sl) {
    fiber_destroy(sl);
    if (s.stack_cache.size() < 64)
        s.stack_cache.push_back(sl.stack);
    else
        stacks_.release(sl.stack);
    sl.stack = stack_mem{};
    // Not s.current_gen: a direct switch finalizes on the next actor's turn.
    pid me{sl.index, state_word::gen_of(sl.word.load())};
    {
        std::unique_lock g(sl.cold_mu);
        sl.word.finish();
        // The common end skips the hand-over: no tenant of this slot was ever
        // joined while running, monitored or linked (the extension, once
        // made, stays with the slot and is only emptied by reclaim).
        if (sl.ext) {
            std::vector<std::pair<pid, std::uint32_t>> joiners;
            std::vector<std::pair<std::uint64_t, sender<down>>> monitors;
            std::vector<pid> links;
            joiners.swap(sl.ext->joiners);
            monitors.swap(sl.ext->monitors);
            links.swap(sl.ext->links);
            sl.ext->trap.reset();
            g.unlock();
            for (auto& [p, e] : joiners)
                unpark_at(p, e, &s);
            // Monitors and links are told before live_ drops (their wakes
            // count).
            if (!monitors.empty() || !links.empty())
                notify_exit(*this, s, me, sl.end_kind(), sl.end_error, monitors, links);
        }
    }
    if (sl.pg_member) {
        sl.pg_member = false;
        groups_.evict(me);
    }
    if (me == root_) root_exited_.store(true, std::memory_order_release);
    if (sl.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) reclaim(sl);
    // Last: every wake this finalize produced is already enqueued.
    live_.fetch_sub(1, std::memory_order_acq_rel);
}

void runtime_impl::reclaim(slot& sl) noexcept {
    {
        std::lock_guard g(sl.cold_mu);
        sl.end_error = nullptr;
        if (sl.ext) {
            // finalize moved the lists out; what is left is capacity.
            sl.ext->monitors.clear();
            sl.ext->links.clear();
            sl.ext->trap.reset();
            sl.ext->joiners.clear();
        }
        sl.parent = pid{};
        sl.word.reclaim();
    }
    scheduler* s = current_scheduler();
    if (s != nullptr && s->rt == this) {
        s->slot_cache.push_back(sl.index);
        if (s->slot_cache.size() > 128) slots_.release_batch(s->slot_cache, 64);
    } else {
        slots_.release(sl.index);
    }
}

void runtime_impl::release_handle(pid p) noexcept {
    slot* sl = slots_.at(p.index);
    if (sl != nullptr && sl->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) reclaim(*sl);
}

outcome runtime_impl::join(pid p) {
    auto [s, self] = actor_or_throw("smarm::join_handle::join");
    const pid me{self->index, s->current_gen};
    if (me == p)
        throw std::logic_error("smarm::join_handle::join: actor " + p.to_string() +
                               " cannot join itself");
    // The handle holds a reference, so the slot is still p's.
    slot* sl = slots_.at(p.index);
    observe_on(s);
    // Done already (the common case once a child ran): the acquire load
    // pairs with finish()'s release, which came after end_kind/end_error
    // were written, and nobody writes them again while a handle lives.
    if (state_word::state_of(sl->word.load()) == actor_state::done)
        return outcome{sl->end_kind(), sl->end_error};
    for (;;) {
        {
            std::lock_guard g(sl->cold_mu);
            std::uint64_t w = sl->word.load();
            if (state_word::state_of(w) == actor_state::done)
                return outcome{sl->end_kind(), sl->end_error};
            sl->ext_make().joiners.emplace_back(me, begin_wait());
        }
        park();
    }
}

// ---------------------------------------------------------------------------
// timers
// ---------------------------------------------------------------------------

std::uint64_t runtime_impl::arm_wake(clock::time_point deadline, pid p, std::uint32_t epoch) {
    std::lock_guard g(timers_mu_);
    std::uint64_t id = timers_.insert_wake(deadline, p, epoch);
    timers_pending_.store(timers_.size(), std::memory_order_release);
    coord_.note_deadline(deadline);
    return id;
}

std::uint64_t runtime_impl::arm_call(clock::time_point deadline, unique_function fn) {
    std::lock_guard g(timers_mu_);
    std::uint64_t id = timers_.insert_call(deadline, std::move(fn));
    timers_pending_.store(timers_.size(), std::memory_order_release);
    coord_.note_deadline(deadline);
    return id;
}

bool runtime_impl::disarm(std::uint64_t id) noexcept {
    std::lock_guard g(timers_mu_);
    bool was = timers_.cancel(id);
    if (was) {
        timers_pending_.store(timers_.size(), std::memory_order_release);
        coord_.refresh_deadline(timers_.peek());
    }
    return was;
}

void runtime_impl::defer_wake(scheduler& s, std::uint32_t epoch, std::uint64_t at,
                              std::chrono::nanoseconds d) noexcept {
    slot& sl = *s.current;
    auto& w = sl.dwake;
    std::lock_guard g(w.mu);
    w.epoch = epoch;
    w.at = at;
    w.timeout = d.count();
    if (s.deferred.size() < s.deferred.capacity()) {
        w.st = slot::deferred_wake::state::deferred;
        s.deferred.emplace_back(sl.index, s.current_gen);
        return;
    }
    // The list is full (hundreds of timed waits began in one loop turn):
    // arm now rather than allocate on the actor's stack. arm_wake may throw
    // only on allocation failure; then the wait has no timer, as before
    // the heap could hold it.
    try {
        w.id = arm_wake(deadline_after(at, d), pid{sl.index, s.current_gen}, epoch);
        w.st = slot::deferred_wake::state::armed;
    } catch (...) {
        w.st = slot::deferred_wake::state::none;
    }
}

void runtime_impl::end_deferred_wake(slot& sl) noexcept {
    auto& w = sl.dwake;
    std::uint64_t id = 0;
    {
        std::lock_guard g(w.mu);
        if (w.st == slot::deferred_wake::state::armed) id = w.id;
        w.st = slot::deferred_wake::state::none;
    }
    if (id != 0) disarm(id);
}

void runtime_impl::arm_deferred(scheduler& s) {
    for (auto [idx, gen] : s.deferred) {
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
    s.deferred.clear();
}

void runtime_impl::fire_due_timers(scheduler& s, bool try_only) {
    {
        std::unique_lock lk(timers_mu_, std::defer_lock);
        if (try_only) {
            // Another scheduler is in the heap: the snapshot stays due, so
            // the check comes back next iteration.
            if (!lk.try_lock()) return;
        } else {
            lk.lock();
        }
        timers_.pop_due(clock::now(), s.fired);
        timers_pending_.store(timers_.size(), std::memory_order_release);
        coord_.refresh_deadline(timers_.peek());
    }
    bump(s.timer_fires, s.fired.size());
    for (auto& f : s.fired) {
        if (f.call) {
            try {
                f.call();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "smarm: a timer callback threw: %s\n", e.what());
            } catch (...) {
                std::fprintf(stderr, "smarm: a timer callback threw a non-std exception\n");
            }
        } else {
            // Several due at once (a late wake, or equal deadlines): FIFO
            // through the shared queue, so they run in deadline order. The
            // wake slot is LIFO: each placement would displace the previous
            // one, and the last timer would run first.
            unpark_at(f.target, f.epoch, s.fired.size() == 1 ? &s : nullptr);
        }
    }
    s.fired.clear();
}

runtime_stats runtime_impl::stats() const {
    runtime_stats r;
    for (unsigned i = 0; i < cfg_.schedulers; ++i) {
        const scheduler& s = scheds_[i];
        scheduler_stats st;
        st.pops = s.pops.load(std::memory_order_relaxed);
        st.parks = s.parks.load(std::memory_order_relaxed);
        st.wakes = s.wakes.load(std::memory_order_relaxed);
        st.yields = s.yields.load(std::memory_order_relaxed);
        st.overruns = s.overruns.load(std::memory_order_relaxed);
        st.timer_fires = s.timer_fires.load(std::memory_order_relaxed);
        st.queue_len = queue_.size();
        r.schedulers.push_back(st);
    }
    for (unsigned i = 0; i < cfg_.schedulers; ++i)
        r.spawns += scheds_[i].spawns.load(std::memory_order_relaxed);
    r.live_actors = live_.load(std::memory_order_relaxed);
    r.timers_pending = timers_pending_.load(std::memory_order_relaxed);
    r.run_queue_len = queue_.size();
    return r;
}

// ---------------------------------------------------------------------------
// the wait protocol (detail/wait.hpp)
// ---------------------------------------------------------------------------

pid current_pid(const char* call) {
    auto [s, sl] = actor_or_throw(call);
    return pid{sl->index, s->current_gen};
}

pid current_pid_or_invalid() noexcept {
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr) return pid{};
    return pid{s->current->index, s->current_gen};
}

reply_cell_ref current_reply_cell(const char* call) {
    auto [s, sl] = actor_or_throw(call);
    return {&sl->reply, pid{sl->index, s->current_gen}};
}

std::uint32_t begin_wait() noexcept {
    return current_scheduler()->current->word.begin_wait();
}

wait_token open_wait(const char* call) {
    auto [s, sl] = actor_or_throw(call);
    return {pid{sl->index, s->current_gen}, sl->word.begin_wait()};
}

void unpark_at(pid p, std::uint32_t epoch) noexcept {
    if (scheduler* s = current_scheduler()) {
        s->rt->unpark_at(p, epoch, s);
    } else if (runtime_impl* rt = g_active.load(std::memory_order_acquire)) {
        rt->unpark_at(p, epoch, nullptr);
    }
}

void retire_wait() noexcept {
    current_scheduler()->current->word.retire_wait();
}

bool wait_is_open(pid p, std::uint32_t epoch) noexcept {
    scheduler* s = current_scheduler();
    runtime_impl* rt = s ? s->rt : g_active.load(std::memory_order_acquire);
    if (rt == nullptr) return false;
    slot* sl = rt->slots().at(p.index);
    if (sl == nullptr) return false;
    std::uint64_t w = sl->word.load();
    auto st = state_word::state_of(w);
    return state_word::gen_of(w) == p.generation &&
           state_word::epoch_of(w) == (epoch & state_word::epoch_mask) &&
           (st == actor_state::parked || st == actor_state::running ||
            st == actor_state::running_notified);
}

void throw_if_stopped() {
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr) return;
    if (may_throw_stop(*s->current, s->current_gen)) throw stopped{};
}

void observe() {
    observe_on(current_scheduler());
}

void unpark_then_observe(pid p, std::uint32_t epoch) {
    scheduler* s = entry_scheduler();  // read once, before the possible yield
    if (s == nullptr) {
        if (p.valid()) unpark_at(p, epoch);  // a sender outside the runtime
        return;
    }
    if (p.valid()) s->rt->unpark_at(p, epoch, s);
    observe_on(s);
}

wait_token observe_and_open(const char* call) {
    scheduler* s = entry_scheduler();  // after a yield, observe_on returns the new one
    if (s == nullptr || s->current == nullptr) actor_or_throw(call);  // throws
    s = observe_on(s);  // it may have yielded and moved us
    slot& sl = *s->current;
    return {pid{sl.index, s->current_gen}, sl.word.begin_wait(), &sl.messages};
}

unsigned& runtime_lock_depth() noexcept {
    thread_local unsigned depth = 0;
    return depth;
}

void alloc_observe() noexcept {
    if (runtime_lock_depth() != 0) return;
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr) return;
    const std::uint32_t every = s->rt->config().alloc_check_interval;
    if (every == 0 || ++s->alloc_count < every) return;
    s->alloc_count = 0;
    if (s->current->no_preempt != 0 || ticks() < s->slice_end) return;
    bump(s->yields);
    fiber_suspend(switch_reason::yield);
}

void note_message_received() noexcept {
    scheduler* s = current_scheduler();
    if (s != nullptr && s->current != nullptr) bump(s->current->messages);
}

std::uint64_t arm_wake_timer(clock::time_point deadline, pid p, std::uint32_t epoch) {
    return actor_scheduler("smarm timer").rt->arm_wake(deadline, p, epoch);
}

std::uint64_t arm_call_timer(clock::time_point deadline, unique_function fire) {
    scheduler* s = current_scheduler();
    runtime_impl* rt = s ? s->rt : g_active.load(std::memory_order_acquire);
    if (rt == nullptr) throw std::logic_error("smarm::send_after: no runtime is running");
    return rt->arm_call(deadline, std::move(fire));
}

clock::time_point deadline_after(std::uint64_t at, std::chrono::nanoseconds d) noexcept {
    const auto now = clock::now();
    const std::uint64_t t = ticks();
    const auto since = std::chrono::nanoseconds(
        t > at ? static_cast<std::int64_t>(static_cast<double>(t - at) / ticks_per_ns()) : 0);
    const auto begun = now - since;
    if (d >= clock::time_point::max() - begun) return clock::time_point::max();
    return begun + d;
}

void defer_wake(std::uint32_t epoch, std::uint64_t at, std::chrono::nanoseconds d) noexcept {
    scheduler* s = current_scheduler();
    s->rt->defer_wake(*s, epoch, at, d);
}

void end_deferred_wake() noexcept {
    scheduler* s = current_scheduler();
    s->rt->end_deferred_wake(*s->current);
}

bool disarm_timer(std::uint64_t id) noexcept {
    scheduler* s = current_scheduler();
    runtime_impl* rt = s ? s->rt : g_active.load(std::memory_order_acquire);
    return rt != nullptr && rt->disarm(id);
}

// ---- runtime.hpp detail hooks ----

spawn_reservation spawn_reserve(std::size_t size, std::size_t align, const task_vtable* vt) {
    scheduler* s = observe_on(actor_or_throw("smarm::spawn").s);  // it may have moved us
    return s->rt->reserve(size, align, vt, s);
}

void spawn_abandon(spawn_reservation& r) noexcept {
    static_cast<runtime_impl*>(r.rt)->abandon(r);
}

void spawn_commit(spawn_reservation& r) noexcept {
    auto* rt = static_cast<runtime_impl*>(r.rt);
    scheduler* s = current_scheduler();
    rt->commit(
        r, s != nullptr && s->current != nullptr ? pid{s->current->index, s->current_gen} : pid{},
        s);
    if (s != nullptr && s->current != nullptr && s->current->no_preempt == 0 &&
        s->wake_slot == r.slot)
        fiber_suspend(switch_reason::handoff);
}

void release_handle(void* rt, pid p) noexcept {
    static_cast<runtime_impl*>(rt)->release_handle(p);
}

outcome join_actor(void* rt, pid p) {
    return static_cast<runtime_impl*>(rt)->join(p);
}

}  // namespace smarm::detail

// ---------------------------------------------------------------------------
// public API
// ---------------------------------------------------------------------------

namespace smarm {

using detail::current_scheduler;

runtime::runtime(runtime_config cfg) : impl_(std::make_unique<detail::runtime_impl>(cfg)) {}
runtime::~runtime() = default;
void runtime::run(detail::unique_function root) {
    impl_->run(std::move(root));
}
const runtime_config& runtime::config() const noexcept {
    return impl_->config();
}
runtime_stats runtime::stats() const {
    return impl_->stats();
}

void run(detail::unique_function root, runtime_config cfg) {
    runtime rt(cfg);
    rt.run(std::move(root));
}

pid self_pid() {
    return detail::current_pid("smarm::self_pid");
}

bool in_actor() noexcept {
    auto* s = current_scheduler();
    return s != nullptr && s->current != nullptr;
}

void yield_now() {
    (void)detail::current_pid("smarm::yield_now");
    detail::throw_if_stopped();
    detail::fiber_suspend(detail::switch_reason::yield);
    detail::throw_if_stopped();
}

void sleep_until(std::chrono::steady_clock::time_point deadline) {
    pid me = detail::current_pid("smarm::sleep");
    detail::observe();
    while (detail::clock::now() < deadline) {
        std::uint32_t epoch = detail::begin_wait();
        std::uint64_t id = detail::arm_wake_timer(deadline, me, epoch);
        try {
            detail::park();
        } catch (...) {
            detail::disarm_timer(id);
            throw;
        }
        // Woken early only by a stop deferred under no_preempt: drop the
        // old timer and wait again.
        if (detail::clock::now() < deadline) detail::disarm_timer(id);
    }
}

void sleep(std::chrono::nanoseconds d) {
    sleep_until(detail::clock::now() + d);
}
void sleep_wall(std::chrono::nanoseconds d) {
    sleep(d);
}

bool request_stop(pid p) noexcept {
    if (auto* s = current_scheduler()) return s->rt->request_stop(p);
    if (auto* rt = detail::g_active.load(std::memory_order_acquire)) return rt->request_stop(p);
    return false;
}

void check() {
    detail::observe();
}

no_preempt::no_preempt() noexcept : slot_(nullptr) {
    auto* s = current_scheduler();
    if (s != nullptr && s->current != nullptr) {
        slot_ = s->current;
        ++s->current->no_preempt;
    }
}

no_preempt::~no_preempt() {
    if (slot_ != nullptr) --static_cast<detail::slot*>(slot_)->no_preempt;
}

}  // namespace smarm
