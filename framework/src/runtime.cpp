// The runtime's construction and validation, run() (threads, the root,
// teardown), stats(), the tick source and the public facade (runtime.hpp).
// The rest of the runtime: see runtime_impl.hpp's opening lines.

#include "runtime_impl.hpp"

#include <smarm/detail/spinlock.hpp>
#include <smarm/detail/wait.hpp>
#include <smarm/runtime.hpp>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <pthread.h>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "fiber.hpp"
#include "io_driver.hpp"
#include "names.hpp"
#include "observe.hpp"
#include "trace_hooks.hpp"

namespace smarm::internal {

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

}  // namespace smarm::internal

namespace smarm::detail {

using namespace smarm::internal;

std::uint64_t ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    return static_cast<std::uint64_t>(clock::now().time_since_epoch().count());
#endif
}

std::uint64_t queue_stamp() noexcept {
    // The observation point's last clock read (a plain field of this
    // thread's scheduler): no clock read per queued message.
    if (const scheduler* s = tl_sched; s != nullptr && s->obs_mark != 0) return s->obs_mark;
    return ticks();
}

}  // namespace smarm::detail

namespace smarm::internal {

double ticks_per_ns() noexcept {
    static const double v = [] {
#if defined(__x86_64__) || defined(__i386__)
        // Wall time, never the runtime's clock_source: a manual clock does
        // not move while this thread sleeps.
        using wall = std::chrono::steady_clock;
        auto t0 = wall::now();
        std::uint64_t c0 = ticks();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        auto t1 = wall::now();
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
      slots_(cfg_.max_actors),
      queue_(cfg_.max_actors),
      coord_(cfg_.schedulers, usable_cpus()),
      cores_(usable_cpus(), std::min(cfg_.schedulers, usable_cpus())),
      stacks_(cfg_.stack_size, cfg_.guard_pages, guarded_stack_budget(cfg_)),
      // Busy-path timer due-check period: 1 us.
      timers_(*this, coord_, slots_, static_cast<std::uint64_t>(1000.0 * ticks_per_ns())),
      scheds_(std::make_unique<scheduler[]>(cfg_.schedulers)),
      names_(std::make_unique<registry>()),
      groups_(std::make_unique<process_groups>()) {
    for (unsigned i = 0; i < cfg_.schedulers; ++i) {
        scheds_[i].rt = this;
        scheds_[i].id = i;
    }
    trace_hooks::start_from_env();
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
    if (cfg_.clock != nullptr) {
        const clock_source* none = nullptr;
        if (!clock_override.compare_exchange_strong(none, cfg_.clock, std::memory_order_acq_rel)) {
            running_.store(false);
            throw std::logic_error(
                "smarm::runtime::run: another run already uses a clock_source (one at a time)");
        }
        cfg_.clock->run_.store(this, std::memory_order_release);
    }
    // The clock goes back to steady_clock however the run ends.
    struct clock_reset {
        const clock_source* c;
        ~clock_reset() {
            if (c == nullptr) return;
            c->run_.store(nullptr, std::memory_order_release);
            clock_override.store(nullptr, std::memory_order_release);
        }
    } reset_clock{cfg_.clock};
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
             {&s.pops, &s.parks, &s.wakes, &s.yields, &s.overruns, &s.timers.fires, &s.spawns})
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
    // The caller's thread is scheduler 0: its trace track says so (the
    // others' default to their thread names).
    trace::name_thread("smarm-sched-0");
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
    names_->clear();  // bindings hold senders: drop them with the run
    groups_->clear();
    io_.reset();  // joins the epoll thread and the pool (all idle by now)
    timers_.clear();
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

void runtime_impl::sample_core_share() noexcept {
    if (!cfg_.share_cores) return;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);  // wall time, never the runtime's clock_source
    std::uint64_t spun = 0;
    for (unsigned i = 0; i < cfg_.schedulers; ++i)
        spun += scheds_[i].spin_ticks.load(std::memory_order_relaxed);
    const core_share::verdict v =
        cores_.sample(static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
                          static_cast<std::uint64_t>(ts.tv_nsec),
                      static_cast<std::uint64_t>(static_cast<double>(spun) / ticks_per_ns()));
    spin_allowed_.store(v.spin, std::memory_order_relaxed);
    if (coord_.set_awake_cap(v.cap) && !queue_.empty()) coord_.wake_one_if_idle();
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
        st.timer_fires = s.timers.fires.load(std::memory_order_relaxed);
        st.queue_len = queue_.size();
        // Utilisation: a spell in progress counts as parked (a reader
        // racing its end may count a few ticks twice: a bounded blur).
        const std::uint64_t now = ticks(), began = s.started.load(std::memory_order_relaxed);
        const std::uint64_t since = s.idle_since.load(std::memory_order_relaxed);
        const double tpn = ticks_per_ns();
        const auto ns = [tpn](std::uint64_t t) { return static_cast<std::uint64_t>(t / tpn); };
        st.spinning_ns = ns(s.spin_ticks.load(std::memory_order_relaxed));
        st.parked_ns = ns(s.park_ticks.load(std::memory_order_relaxed) +
                          (since != 0 && now > since ? now - since : 0));
        st.running_ns = began != 0 && now > began ? ns(now - began) : 0;
        st.busy_ns = st.running_ns > st.spinning_ns + st.parked_ns
                         ? st.running_ns - st.spinning_ns - st.parked_ns
                         : 0;
        r.schedulers.push_back(st);
    }
    for (unsigned i = 0; i < cfg_.schedulers; ++i)
        r.spawns += scheds_[i].spawns.load(std::memory_order_relaxed);
    r.live_actors = live_.load(std::memory_order_relaxed);
    r.timers_pending = timers_.pending();
    r.run_queue_len = queue_.size();
    r.max_actors = cfg_.max_actors;
    r.awake_cap = coord_.awake_cap();
    r.idle_spin = spin_ticks_ != 0 && spin_allowed_.load(std::memory_order_relaxed);
    const std::uint64_t began = scheds_[0].started.load(std::memory_order_relaxed);
    if (const std::uint64_t now = ticks(); began != 0 && now > began)
        r.uptime_ns = static_cast<std::uint64_t>(static_cast<double>(now - began) / ticks_per_ns());
    return r;
}

}  // namespace smarm::internal

// ---------------------------------------------------------------------------
// public API
// ---------------------------------------------------------------------------

namespace smarm {

using internal::current_scheduler;

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
    if (detail::trace_active()) internal::current_scheduler()->trace_voluntary = true;
    internal::fiber_suspend(internal::switch_reason::yield);
    detail::throw_if_stopped();
}

bool request_stop(pid p) noexcept {
    if (auto* s = current_scheduler()) return s->rt->request_stop(p);
    if (auto* rt = internal::g_active.load(std::memory_order_acquire)) return rt->request_stop(p);
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
    if (slot_ != nullptr) --slot_->no_preempt;
}

}  // namespace smarm
