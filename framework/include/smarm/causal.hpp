#pragma once
// smarm::causal — the causal profiler's runtime half: sites, the experiment
// word and the delay ledgers.
//
// The question: if the code of site S ran p% faster, how much faster would
// the program make progress? As in Coz, S is not sped up; every other actor
// is slowed down instead. While an experiment (S, p) runs, each sample the
// observation point takes of an actor inside S adds interval * p / 100 to a
// global delay ledger; every actor keeps its own ledger and, at its next
// observation point, spins off the difference (at most a bounded amount per
// visit), and that spin is not charged to its timeslice. The progress
// points' rates over the window's virtual time (wall minus injected delay)
// then read as the program's speedup.
//
// The rules, each tested (tests/framework/causal_test.cpp):
// - A site is per actor: its id lives in the actor's slot, so it survives
//   preemption and migration; guards nest (the outer site is restored);
//   outside an actor a guard does nothing.
// - An actor resumed after a real park (it waited on something) is forgiven
//   the delay that accrued while it waited: its ledger is set to the global
//   one. An actor that yielded or was preempted was runnable all along and
//   keeps its debt.
// - A new actor is born current (its ledger starts at the global one).
// - Leaving the selected site, or switching out inside it, flushes the
//   sample interval since the last sample (the tail is not lost); entering
//   it, or resuming, re-arms the sample clock (time before the site or off
//   the CPU is never attributed to it).
// - Ledgers are in ticks (TSC where available); ticks_per_ns is measured at
//   start, never assumed.
//
// Cost when no experiment runs: one relaxed load at each switch and at each
// observation point's clock read. Configured out entirely with
// -DSMARM_CAUSAL=OFF (SMARM_CAUSAL_ENABLED 0): the guard is then empty.
//
// Thread safety: every function may be called from any thread; begin/end
// are meant for one controller at a time.

#include <cstdint>
#include <string>
#include <string_view>

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
    std::uint64_t injected = 0;  ///< added to the global ledger by in-site samples
    std::uint64_t absorbed = 0;  ///< spun off by actors paying their debt
    std::uint64_t forgiven = 0;  ///< waived at resume after a real park
    /// In-site intervals closed by a switch-out (attributed like any
    /// sample: the actor was on-CPU in the site until it left).
    std::uint64_t tail_park = 0;
    std::uint64_t tail_park_n = 0;
    std::uint64_t tail_yield = 0;
    std::uint64_t tail_yield_n = 0;
    std::uint64_t discarded = 0;  ///< samples over the sanity bound, not believed
    std::uint64_t discarded_n = 0;
    std::uint64_t unarmed_n = 0;  ///< in-site samples with no interval to attribute
    ledger operator-(const ledger& before) const noexcept;
};
ledger totals() noexcept;

/// The global delay ledger (ticks): the delay every actor should have seen.
std::uint64_t global_delay() noexcept;
/// The calling actor's own ledger (0 outside an actor).
std::uint64_t my_delay() noexcept;
/// Adds `ticks` to the global ledger as if in-site samples had: for tests
/// that need a known debt.
void inject_for_test(std::uint64_t ticks) noexcept;
/// Ticks to nanoseconds at the measured rate.
double ticks_to_ns(std::uint64_t ticks) noexcept;

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
