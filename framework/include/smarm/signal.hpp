#pragma once
// smarm signals: process signals delivered to actors.
//
//     smarm::signal_set sigs{SIGTERM, SIGINT};  // caught from here on
//     int sig = sigs.wait();                    // parks this actor only
//     srv.stop();                               // the application's policy
//     if (sigs.wait() == SIGINT) srv.stop(std::chrono::seconds(0));
//
// A signal_set catches its signals for as long as it lives: each delivery
// after its construction is queued for it (every live set with that signal
// gets its own copy) and wait() returns them in order, one per call. The
// process-wide handler is installed while any set holds the signal and the
// previous disposition comes back when the last such set goes, so a set's
// end never removes the handling another still relies on (a set destroyed
// under its successor, as when a server is restarted, leaves the signal
// caught). Deliveries beyond what a set has not waited for (64 KiB of
// them) are dropped, as the kernel coalesces a pending signal.
//
// Thread safety: construct and destroy from any thread; wait() from one
// actor at a time per set. At most 64 sets live at once (a
// std::runtime_error past that). SIGKILL, SIGSTOP and numbers outside
// 1..64 cannot be caught (std::invalid_argument).

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <optional>

namespace smarm {

class signal_set {
  public:
    /// Catches `signals` from now on. Throws std::invalid_argument naming a
    /// signal that cannot be caught, std::system_error when the pipe or the
    /// handler cannot be made.
    explicit signal_set(std::initializer_list<int> signals);
    ~signal_set();
    signal_set(const signal_set&) = delete;
    signal_set& operator=(const signal_set&) = delete;

    /// Parks the calling actor until a signal of the set arrives (or one
    /// already did since the last wait) and returns its number; 0 when
    /// `timeout` passes first.
    int wait(std::optional<std::chrono::nanoseconds> timeout = std::nullopt);

  private:
    std::size_t slot_;
};

/// Parks the calling actor until one of `signals` arrives and returns it.
/// Only signals delivered after the call count: to miss none between two
/// waits, hold a signal_set instead.
int wait_signal(std::initializer_list<int> signals);

}  // namespace smarm
