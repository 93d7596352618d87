#pragma once
// smarm::causal — the causal profiler's runtime half: sites, the experiment
// word and the delay ledgers.
//
// The question: if the code of site S ran p% faster, how much faster would
// the program make progress? As in Coz, S is not sped up; everything else
// is slowed down instead. While an experiment (S, p) runs, each sample the
// observation point takes of an actor inside S adds interval * p / 100 to
// a global delay ledger and the same to the ledger of the core (scheduler)
// that ran it; every core, at its next observation points, spins off the
// difference between the global ledger and its own (at most a bounded
// amount per visit), whichever actor it runs, in the site or not, and that
// spin is not charged to the timeslice. The progress points' rates over the
// window's virtual time (wall minus injected delay) then read as the
// program's speedup.
//
// The rules, each tested (tests/framework/causal_test.cpp):
// - A site is per actor: its id lives in the actor's slot, so it survives
//   preemption and migration; guards nest (the outer site is restored);
//   outside an actor a guard does nothing.
// - The shared delay is the core's, not the actor's: a core's timeline is
//   what in-site code shortens (what it runs next would start earlier), so
//   several actors in the site on one core, or more in-site actors than
//   cores, credit and pay per core. Per actor, a crowded site was overstated
//   (in-site actors never paid) or understated (they paid for samples their
//   own core had already run).
// - An idle core is forgiven the delay that accrued while it found nothing
//   to run: the sped-up program would have idled too.
// - An actor resumed after a real park on another actor (a channel, a
//   mutex, a call) or on a timer owes nothing of its own: its waker ran in
//   the same slowed timeline (timers keep virtual time, below). One that
//   waited on the world outside (IO readiness, a blocking-pool job) owes,
//   itself, the delay injected during the wait: that world was not slowed
//   (Coz's rule for threads the kernel wakes). It pays at its observation
//   points; the core that spins for it is credited the same. Yields and
//   preemptions change no debt. A new actor owes nothing.
// - Virtual time: a timer's deadline shifts by the delay injected since it
//   was armed (sleep, send_after, receive and call timeouts, gen_server and
//   gen_statem timers); sleep_wall and send_after_wall are exempt.
// - Leaving the selected site, or switching out inside it, flushes the
//   sample interval since the last sample (the tail is not lost); entering
//   it, or resuming, re-arms the sample clock (time before the site or off
//   the CPU is never attributed to it).
// - Ledgers are in ticks (TSC where available); ticks_per_ns is measured at
//   start, never assumed.
//
// Cost when no experiment runs: one relaxed load at each switch, at each
// observation point's clock read and at each timer's arm and firing, and a
// byte store in the actor's slot at each wait on IO. Configured out
// entirely with -DSMARM_CAUSAL=OFF (SMARM_CAUSAL_ENABLED 0): the guard is
// then empty.
//
// Thread safety: every function may be called from any thread; begin/end
// are meant for one controller at a time.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#ifndef SMARM_CAUSAL_ENABLED
#define SMARM_CAUSAL_ENABLED 1
#endif

namespace smarm::internal {
struct slot;
}

namespace smarm::causal {

/// A registered site; 0 is "no site".
using site_id = std::uint32_t;

/// Registers `name` (copied) or finds it; the same name gives the same id.
/// Takes a lock: SMARM_CAUSAL_SITE calls it once per call site.
site_id register_site(std::string_view name);
/// The name of `id` ("" for 0 or an unknown id).
std::string site_name(site_id id);
/// The site the calling actor is in (0 outside any site or any actor).
site_id current_site() noexcept;

/// While alive, the calling actor is inside `site`; see SMARM_CAUSAL_SITE.
class site_guard {
  public:
    explicit site_guard(site_id site) noexcept;
    ~site_guard();
    site_guard(const site_guard&) = delete;
    site_guard& operator=(const site_guard&) = delete;

  private:
    internal::slot* slot_;  ///< null outside an actor
    site_id prev_ = 0;
};

/// While alive, the gen_server calls the calling actor makes are handled
/// inside `site` on the server's side (the server's own sites nest inside
/// it): the service half of a registry-routed HTTP route, say. Nests; 0
/// hands off nothing; outside an actor it does nothing.
class handoff_guard {
  public:
    explicit handoff_guard(site_id site) noexcept;
    ~handoff_guard();
    handoff_guard(const handoff_guard&) = delete;
    handoff_guard& operator=(const handoff_guard&) = delete;

  private:
    internal::slot* slot_;
    site_id prev_ = 0;
};
}  // namespace smarm::causal

namespace smarm::detail {
/// Set by the first handoff_guard that names a site; until then a
/// gen_server call reads this one flag instead of looking up its slot.
/// Relaxed: only the guard's own actor reads the site it set, after the
/// store in its own program order (a migration between threads is an
/// acquire/release hand-off), so no other ordering is needed.
inline std::atomic<bool> causal_handoff_used{false};
causal::site_id causal_handoff_lookup() noexcept;
}  // namespace smarm::detail

namespace smarm::causal {
/// The site the calling actor's calls are handed to (0: none). Inline: a
/// relaxed load while no handoff_guard has named a site.
inline site_id handoff_site() noexcept {
#if SMARM_CAUSAL_ENABLED
    if (!detail::causal_handoff_used.load(std::memory_order_relaxed)) return 0;
    return detail::causal_handoff_lookup();
#else
    return 0;
#endif
}

/// Starts an experiment: samples inside `site` inject `speedup_pct`% of
/// their interval as delay (0 = a baseline window). Bumps the window epoch.
/// std::invalid_argument for site 0 or a speedup over 100.
void begin(site_id site, unsigned speedup_pct);
/// Ends the running experiment (no-op when none runs).
void end() noexcept;
/// True while an experiment runs.
bool running() noexcept;

/// Where delay went, in ticks (counts where named _n). Monotonic totals
/// since the process started; a window is the difference of two reads.
struct ledger {
    std::uint64_t injected = 0;    ///< added to the global ledger by in-site samples
    std::uint64_t injected_n = 0;  ///< the samples that added it
    std::uint64_t absorbed = 0;    ///< spun off at observation points (cores and actors paying)
    std::uint64_t forgiven =
        0;  ///< waived: idle cores, earlier windows, own debt after a real park
    /// In-site intervals closed by a switch-out (attributed like any
    /// sample: the actor was on-CPU in the site until it left).
    std::uint64_t tail_park = 0;
    std::uint64_t tail_park_n = 0;
    std::uint64_t tail_yield = 0;
    std::uint64_t tail_yield_n = 0;
    std::uint64_t discarded = 0;  ///< samples over the sanity bound, not believed
    std::uint64_t discarded_n = 0;
    std::uint64_t unarmed_n = 0;  ///< in-site samples with no interval to attribute
    /// Measure-only: run-queue waits of the site's actors after a yield or
    /// preemption inside the site, scaled by the speedup (what attributing
    /// wall time rather than on-CPU time would have added).
    std::uint64_t offcpu = 0;
    std::uint64_t offcpu_n = 0;
    /// Waits on the world outside (IO readiness, a blocking-pool job) made
    /// inside the site, at the speedup's share: attributed (part of
    /// `injected`), as if the outside work were that much faster.
    std::uint64_t outside = 0;
    std::uint64_t outside_n = 0;
    ledger operator-(const ledger& before) const noexcept;
};
ledger totals() noexcept;

/// The global delay ledger (ticks): the delay every core should have seen.
std::uint64_t global_delay() noexcept;
/// The ledger of the core running the calling actor (0 outside an actor).
std::uint64_t core_delay() noexcept;
/// The calling actor's own debt from waits on the world outside (ticks; 0
/// outside an actor).
std::uint64_t my_debt() noexcept;
/// Adds `ticks` to the global ledger as if in-site samples had: for tests
/// that need a known debt.
void inject_for_test(std::uint64_t ticks) noexcept;
/// Ticks to nanoseconds at the measured rate.
double ticks_to_ns(std::uint64_t ticks) noexcept;

// ---- the controller ----
//
// run(plan) runs experiment windows one after the other and returns what
// each saw. A window selects one site and one speedup, lasts a wall-clock
// length (the controller sleeps wall-anchored: its own sleeps never chase
// the delay it injects), and records every progress and latency point's
// change. A cooldown separates windows. Sites and points must exist when
// run() starts: start the workload first.
//
// Two schedules:
// - sweep: every selected site x every speedup in `speedups`, `rounds`
//   times (the seed's exhaustive sweep; rounds interleave, so slow drift in
//   the workload spreads over every cell instead of biasing one).
// - randomized (Coz): `experiments` windows, each on a random selected site
//   with a speedup drawn from {0, 5, ..., 100}%, where 0 has `baseline_weight`
//   extra chances (every cell needs a baseline to be compared with).
// In both, a window in which a watched point saw fewer than `min_visits`
// events is thin: it is kept in the profile (flagged) but not counted, and
// the window length doubles (up to max_window) until points see enough. A
// sweep repeats a thin cell at the doubled length.

struct plan {
    enum class schedule { sweep, randomized };
    schedule mode = schedule::sweep;
    std::vector<unsigned> speedups{0, 25, 50};  ///< sweep: percent, each <= 100
    unsigned rounds = 1;                        ///< sweep: passes over the cells
    unsigned experiments = 40;                  ///< randomized: windows to run
    unsigned baseline_weight = 7;               ///< randomized: extra odds of 0%
    std::chrono::milliseconds window{500};      ///< shortest window
    std::chrono::milliseconds max_window{8000};
    std::chrono::milliseconds cooldown{10};
    std::uint64_t min_visits = 5;
    /// Site names to experiment on; empty: every registered site. An unknown
    /// name is an error (std::invalid_argument naming it).
    std::vector<std::string> sites;
    /// Points whose visits decide thin windows; empty: every point that
    /// moved since run() began.
    std::vector<std::string> points;
    std::uint64_t seed = 0;  ///< randomized; 0: from the clock
};

/// What one window of a latency point saw.
struct latency_sample {
    std::uint64_t arrivals = 0, departures = 0;
    std::int64_t in_flight = 0;  ///< at the window's end
    double mean_ns = 0;          ///< Little's law, in the window's virtual time
};

/// One experiment window.
struct window {
    std::string site;
    unsigned speedup = 0;  ///< percent
    std::chrono::nanoseconds wall{0};
    std::chrono::nanoseconds injected{0};  ///< delay injected (virtual = wall - injected)
    std::uint64_t samples = 0;             ///< in-site samples that injected delay
    std::map<std::string, std::uint64_t> throughput;  ///< progress point -> visits
    std::map<std::string, latency_sample> latency;
    ledger audit;       ///< the window's share of totals(), ticks
    bool thin = false;  ///< a watched point saw fewer than min_visits: not counted
    std::chrono::nanoseconds virtual_time() const noexcept { return wall - injected; }
};

/// Every window of one run(), and the cells they add up to.
struct profile {
    std::vector<window> windows;
    std::int64_t startup_ns = 0;  ///< system clock at run() start (Coz's `startup`)

    /// One (site, speedup) cell: the counted windows summed.
    struct cell {
        std::string site;
        unsigned speedup = 0;
        unsigned windows = 0;
        std::chrono::nanoseconds wall{0}, injected{0};
        std::map<std::string, std::uint64_t> throughput;
        std::map<std::string, latency_sample> latency;  ///< mean_ns arrival-weighted
        /// Visits per second of virtual time.
        std::optional<double> rate(const std::string& point) const;
    };
    /// Cells ordered by site (first seen) then speedup.
    std::vector<cell> cells() const;
    std::optional<cell> find(std::string_view site, unsigned speedup) const;
    /// Program speedup (percent) at `point` when `site` runs `speedup`%
    /// faster, against the same site's 0% cell: positive is faster (for a
    /// latency point, a shorter mean latency). Empty when either cell is
    /// missing or the baseline saw nothing.
    std::optional<double> impact(std::string_view site, unsigned speedup,
                                 const std::string& point) const;
};

/// Runs `p` and returns the profile. Callable from an actor (the controller
/// parks between checks) or from an OS thread while a runtime runs.
/// std::invalid_argument for a bad plan (named field) or when there is no
/// site to experiment on; std::logic_error when another run() is active.
profile run(const plan& p);

/// One site's place in a ranking (rank()).
struct ranked_site {
    std::string site;
    /// Impact on the point at each measured speedup (percent; see
    /// profile::impact), speedups ascending, 0% left out.
    std::vector<std::pair<unsigned, std::optional<double>>> impacts;
    /// What the ranking orders by: the impact at the largest speedup that
    /// has one (empty when none has).
    std::optional<double> top() const;
};
/// Every site of `pr` ordered by how much making it faster speeds up
/// `point` (a progress or latency point), most first; sites with no
/// measurement last.
std::vector<ranked_site> rank(const profile& pr, const std::string& point);

/// The ranking as a text table: a line per site, its impact on `point` at
/// each speedup (for a latency point: how much shorter the mean latency).
std::string render_ranking(const profile& pr, const std::string& point);

/// A text table: per site, per point, each speedup's rate and impact, then
/// the audit ledger per cell and the fidelity note. With `rank_by` (a
/// progress or latency point), a ranking of the sites by it comes first.
std::string render_summary(const profile& pr, const std::string& rank_by = {});
/// Coz's profile.coz lines (startup, experiment, throughput-point,
/// latency-point, runtime), which Coz's viewer plots. Thin windows are left
/// out, as Coz does.
std::string render_coz(const profile& pr);
/// The whole profile as one JSON object.
std::string render_json(const profile& pr);
/// A gnuplot script drawing program speedup against site speedup, one line
/// per site, for throughput point `point` (empty: the first one), to
/// `output` (.png or .svg; std::invalid_argument otherwise).
std::string render_gnuplot(const profile& pr, const std::string& output,
                           const std::string& point = {});

}  // namespace smarm::causal

#if SMARM_CAUSAL_ENABLED
/// `auto g = SMARM_CAUSAL_SITE("name");` — the calling actor is inside the
/// site `name` until g is destroyed. The name is registered once per call
/// site.
#define SMARM_CAUSAL_SITE(name)                                                          \
    ::smarm::causal::site_guard([]() noexcept -> ::smarm::causal::site_id {              \
        static const ::smarm::causal::site_id id = ::smarm::causal::register_site(name); \
        return id;                                                                       \
    }())
#else
namespace smarm::causal {
struct no_site_guard {};
}  // namespace smarm::causal
#define SMARM_CAUSAL_SITE(name) \
    ::smarm::causal::no_site_guard {}
#endif
