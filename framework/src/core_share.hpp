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

    /// The cap to use now, given the monotonic time `now_ns`. Reads the
    /// counters only once a window has passed since the last read.
    unsigned sample(std::uint64_t now_ns) noexcept;

    /// The cap for a window in which others used `others_cores` of `usable`
    /// cores (the pure rule, for tests).
    static unsigned cap_for(double others_cores, unsigned usable, unsigned max_cap) noexcept;

    static constexpr std::uint64_t window_ns = 100'000'000;

  private:
    bool read(std::uint64_t& busy_ticks, std::uint64_t& self_ns) noexcept;

    int stat_fd_ = -1;
    unsigned usable_, max_cap_;
    double ns_per_tick_;
    std::uint64_t last_ns_ = 0, last_busy_ = 0, last_self_ = 0;
    unsigned cap_, pending_;
};

}  // namespace smarm::internal
