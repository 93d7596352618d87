#pragma once
// How many cores the rest of the machine leaves this process: the input of
// the coordinator's awake cap (coordinator.hpp, "Awake cap").
//
// Design note
// -----------
// A second scheduler pays only when a core is free for it. When a load
// generator (or any other process) keeps a core busy, two schedulers on the
// one core left time-slice against each other and the other process: every
// idle spell parks and is woken by futex, connections bounce between caches,
// and the other process is preempted. Measured (smarm-server, wrk -t1 -c64
// on the same 2 cores): 2 schedulers 8.6 us of CPU per request at 136k req/s,
// the same server capped to one awake scheduler 4.7 us at 212k, one
// scheduler 4.8 us at 206k.
//
// So the cap follows what others use: every window (>= 100 ms) the sampler
// reads the machine's busy time from /proc/stat (every field but idle and
// iowait; steal counts: the hypervisor took it) and subtracts this
// process's CPU time (CLOCK_PROCESS_CPUTIME_ID, which includes the irq and
// softirq ticks taken while our threads ran: the loopback receive path of a
// send). What is left, in cores, is
// what others took; the cap is the usable cores minus that, rounded to the
// nearest whole core, clamped to 1..max. A new value is taken only when two
// windows in a row agree, so one noisy window does not flap it.
//
// Spinning follows the same counters. An idle scheduler spins (polling the
// queue and epoll) before it sleeps, which saves a futex sleep and wake
// when work lands within microseconds, but only while the core it spins on
// is one nobody else wants: on shared cores the spin takes the time of the
// very process that would send the next request. Measured (smarm-server,
// wrk -t2 -c32 with Connection: close on the same 2 cores): spinning 50 us
// 16.5 us of CPU per request at 42k req/s, no spin 12.9 us at 46.5k;
// keep-alive loads are within noise either way (4.6-4.9 us). So a window
// allows spinning only when the cores left idle, counting this process's
// spinning as idle (else spinning would forbid itself next window), are at
// least half a core: usable - others - (self - spun) >= 0.5. The spin flag,
// like the cap, changes only when two windows in a row agree.
//
// Only the epoll thread calls sample() (while it rests: some scheduler is
// awake); the result is a plain value the caller stores in the coordinator.
// Any cap >= 1 keeps the no-lost-wake argument (tests/models/awake_cap.pml).

#include <cstdint>

#include "internal.hpp"

namespace smarm::internal {

class core_share {
  public:
    /// `usable` cores (the affinity mask); the cap never exceeds `max_cap`.
    /// Without a readable /proc/stat the sampler is inert (sample() returns
    /// max_cap).
    core_share(unsigned usable, unsigned max_cap) noexcept;
    ~core_share();
    core_share(const core_share&) = delete;
    core_share& operator=(const core_share&) = delete;

    struct verdict {
        unsigned cap;  ///< schedulers allowed awake
        bool spin;     ///< an idle scheduler may spin before it sleeps
    };

    /// The verdict to use now, given the monotonic time `now_ns` and the
    /// total time this process's schedulers have spent spinning idle
    /// (`spun_ns`, monotonic). Reads the counters only once a window has
    /// passed since the last read.
    verdict sample(std::uint64_t now_ns, std::uint64_t spun_ns) noexcept;

    /// The cap for a window in which others used `others_cores` of `usable`
    /// cores (the pure rule, for tests).
    static unsigned cap_for(double others_cores, unsigned usable, unsigned max_cap) noexcept;

    /// Whether to spin in a window in which others used `others_cores` and
    /// this process `self_busy_cores` outside its idle spinning (the pure
    /// rule, for tests).
    static bool spin_for(double others_cores, double self_busy_cores, unsigned usable) noexcept;

    static constexpr std::uint64_t window_ns = 100'000'000;

  private:
    bool read(std::uint64_t& busy_ticks, std::uint64_t& self_ns) noexcept;

    int stat_fd_ = -1;
    unsigned usable_, max_cap_;
    double ns_per_tick_;
    std::uint64_t last_ns_ = 0, last_busy_ = 0, last_self_ = 0, last_spun_ = 0;
    unsigned cap_, pending_;
    bool spin_ = true, pending_spin_ = true;
};

}  // namespace smarm::internal
