#pragma once
// smarm::runtime_config — every knob of the actor runtime.

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace smarm {

class clock_source;

/// How sockets are registered with epoll (see README: IO benchmarks).
enum class socket_registration { persistent, oneshot };

// clang-format off
/// Configuration of a smarm::runtime. Validated by the runtime constructor,
/// which throws std::invalid_argument naming the field and the bad value.
///
/// | key | meaning | default | valid |
/// |---|---|---|---|
/// | `schedulers` | scheduler OS threads (the caller of run() is thread 0) | 0 = hardware threads | 0 or 1..64 |
/// | `max_actors` | capacity of the slot table (live actors at once) | 1,048,576 | 1..2^28 |
/// | `stack_size` | address space per actor stack, guard page excluded; only touched pages cost memory | 256 KiB | 16 KiB..1 GiB, rounded up to pages |
/// | `timeslice` | how long an actor runs before an observation point yields it | 1 ms | 10 µs..10 s |
/// | `idle_spin` | how long an idle scheduler spins (polling for work and sockets) before it sleeps | 50 µs | 0..10 ms |
/// | `share_cores` | keep no more schedulers awake than the cores other processes leave free (sampled from /proc/stat every 100 ms; an idle scheduler past that cap sleeps instead of spinning), and spin idle only while at least half a core is left idle: a load generator or a neighbour on the same cores then costs no futex churn and no spinning. Off: every scheduler may be awake and spin | true | — |
/// | `guard_pages` | a PROT_NONE page below every stack | true | — |
/// | `alloc_check_interval` | with the `smarm::alloc_preempt` library linked, every Nth allocation of an actor (operator new) may yield it when its timeslice is spent (0 = off) | 0 | any |
/// | `blocking_threads` | threads of the pool that runs blocking calls (`block_on_io`) | 2 | 1..1024 |
/// | `sockets` | how sockets are registered with epoll (socket_registration) | persistent | — |
/// | `clock` | where timers, timeouts and deadlines take their time (clock.hpp; e.g. a manual_clock in tests); not owned, must outlive run() | null = steady_clock | — |
///
/// Preemption precision: an observation point reads the clock only every
/// few points, at a pace learned per actor (about 32 reads per slice, at
/// most one per 64 points), so a spent slice is noticed within ~1/32 of a
/// slice by an actor that observes at a steady pace. When an actor that
/// observed many times per microsecond switches to observing rarely, its
/// first slice after the change can run over by up to 64 of its new gaps.
///
/// The allocation observation point preempts code that never calls the
/// runtime, at a price: an allocation becomes a place where the actor can
/// move to another OS thread, so with it enabled user code must not hold a
/// std::mutex (or any thread-affine lock) across an allocation; use
/// smarm::mutex or a no_preempt region. It only yields; stops still wait
/// for a real observation point.
// clang-format on
struct runtime_config {
    unsigned schedulers = 0;
    std::size_t max_actors = std::size_t{1} << 20;
    std::size_t stack_size = 256 * 1024;
    std::chrono::nanoseconds timeslice = std::chrono::milliseconds(1);
    std::chrono::nanoseconds idle_spin = std::chrono::microseconds(50);
    bool share_cores = true;
    bool guard_pages = true;
    std::uint32_t alloc_check_interval = 0;
    unsigned blocking_threads = 2;
    socket_registration sockets = socket_registration::persistent;
    const clock_source* clock = nullptr;
};

}  // namespace smarm
