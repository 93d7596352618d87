#pragma once
// Runtime counters: per scheduler, and global.

#include <cstdint>
#include <vector>

namespace smarm {

/// Counters of one scheduler thread (monotonic within a run, except
/// queue_len which is the length of the shared queue when last observed).
struct scheduler_stats {
    std::uint64_t pops = 0;      ///< actors resumed
    std::uint64_t parks = 0;     ///< times the thread parked (idle)
    std::uint64_t wakes = 0;     ///< times it returned from an idle park
    std::uint64_t yields = 0;    ///< timeslice expiries that requeued an actor
    std::uint64_t overruns = 0;  ///< actors that ran past twice their timeslice
    std::uint64_t timer_fires = 0;
    std::uint64_t queue_len = 0;
    /// Utilisation since the run began, in nanoseconds: running_ns =
    /// busy_ns + spinning_ns (idle, polling for work) + parked_ns (asleep).
    /// Two reads a second apart give the utilisation of that second.
    std::uint64_t running_ns = 0;
    std::uint64_t busy_ns = 0;
    std::uint64_t spinning_ns = 0;
    std::uint64_t parked_ns = 0;
};

/// A copy of the runtime's counters (smarm::runtime::stats()).
struct runtime_stats {
    std::vector<scheduler_stats> schedulers;
    std::uint64_t spawns = 0;
    std::uint64_t live_actors = 0;
    std::uint64_t timers_pending = 0;
    std::uint64_t run_queue_len = 0;
    std::uint64_t max_actors = 0;  ///< the slot table's capacity (runtime_config::max_actors)
    std::uint64_t uptime_ns = 0;   ///< since the run began
    /// Schedulers the runtime keeps awake at most now: the cores other
    /// processes leave free (runtime_config::share_cores), else all.
    std::uint64_t awake_cap = 0;
    /// Whether an idle scheduler spins before it sleeps now: idle_spin is
    /// set and (with share_cores) at least half a core is left idle by
    /// everything but this process's spinning.
    bool idle_spin = false;
};

}  // namespace smarm
