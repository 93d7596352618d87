#pragma once
// smarm clocks: where the runtime's time comes from.
//
// Every timer, timeout and deadline of the runtime (sleep, send_after,
// recv_timeout, call timeouts, gen_server / gen_statem timers, mutex and
// select timeouts, socket deadlines, supervisor restart windows) reads one
// clock: std::chrono::steady_clock, unless runtime_config::clock names a
// clock_source. manual_clock is the one shipped: time moves only when a
// test says so, so a timing assertion can be exact.
//
//     smarm::manual_clock clk;
//     smarm::runtime_config cfg;
//     cfg.clock = &clk;
//     smarm::run([&] {
//         auto [tx, rx] = smarm::channel<int>();
//         smarm::send_after(tx, 10ms, 1);
//         clk.advance(9ms);   // nothing is due
//         assert(rx.try_recv() == std::nullopt);
//         clk.advance(1ms);   // due now: fired before advance returns
//         assert(rx.recv() == 1);
//     }, cfg);
//
// Preemption (timeslices) and the scheduler's idle spin keep real time.
// The clock is process-wide while a run uses it: one runtime at a time may
// run with a clock_source (a second one is a std::logic_error), and other
// runtimes running meanwhile see its time too.
//
// Thread safety: now() from any thread; advance() from any thread, but it
// waits for due timers only when called from an actor of the run.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace smarm {

namespace internal {
class runtime_impl;
}

/// A source of the runtime's time. now() must be monotonic and cheap; it
/// is read on every timed wait.
class clock_source {
  public:
    using time_point = std::chrono::steady_clock::time_point;
    virtual ~clock_source() = default;
    virtual time_point now() const noexcept = 0;

  protected:
    /// After moving time forward: wakes the run using this clock (if any)
    /// so its due timers fire, and from one of its actors, returns once
    /// every timer due by now() has fired.
    void time_moved() const;

  private:
    friend class internal::runtime_impl;
    mutable std::atomic<internal::runtime_impl*> run_{nullptr};  ///< the run using it
};

/// A clock that moves only when told.
class manual_clock final : public clock_source {
  public:
    /// Starts at `start` (by default, steady_clock's now).
    explicit manual_clock(time_point start = std::chrono::steady_clock::now()) noexcept
        : ns_(start.time_since_epoch().count()) {}

    time_point now() const noexcept override {
        // acquire: pairs with advance()'s release, so a thread that sees
        // the new time sees what the advancer did before.
        return time_point(time_point::duration(ns_.load(std::memory_order_acquire)));
    }
    /// Moves time forward by `d` (negative: std::invalid_argument) and
    /// fires what came due (see clock_source::time_moved).
    void advance(std::chrono::nanoseconds d);
    /// Moves time forward to `t` (a `t` in the past changes nothing).
    void advance_to(time_point t);

  private:
    std::atomic<std::int64_t> ns_;
};

}  // namespace smarm
