#pragma once
// smarm::select — wait on several sources at once.

#include <smarm/pid.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>

namespace smarm {

namespace detail {
/// Something select() can wait on. Implementations: channel receivers (and,
/// with the IO layer, fd arms).
class select_source {
  public:
    /// Under the source's own lock: true when ready (a value queued, or
    /// closed); otherwise register (self, epoch) as the waiter to wake.
    virtual bool ready_or_register(pid self, std::uint32_t epoch) = 0;
    /// Drop a registration made by ready_or_register (eager cleanup for
    /// sources that need it; channel arms need none: stale wakes are inert).
    virtual void unregister(pid, std::uint32_t) noexcept {}

  protected:
    ~select_source() = default;
};
}  // namespace detail

/// One arm of a select: a reference to a waitable source (a receiver<T>).
class select_arm {
  public:
    /// From anything that exposes its select_source() (receivers, fd arms).
    template <class Source>
    requires requires(Source& s) { s.select_source(); }
    select_arm(Source& s) noexcept : src_(&s.select_source()) {}  // NOLINT: implicit by design
    /// From a select_source itself (socket readiness arms).
    select_arm(detail::select_source& s) noexcept : src_(&s) {}  // NOLINT: implicit by design
    detail::select_source* source() const noexcept { return src_; }

  private:
    detail::select_source* src_;
};

/// Parks until one of `arms` is ready and returns its index. Arms are checked
/// in priority order (index 0 first; no fairness promise). A closed channel
/// arm is permanently ready: receive from it (getting "closed") and drop it
/// from the set. Observation point; throws std::logic_error outside an actor
/// or with no arms.
std::size_t select(std::initializer_list<select_arm> arms);

/// Like select(), giving up after `timeout`: nullopt on timeout.
std::optional<std::size_t> select_timeout(std::initializer_list<select_arm> arms,
                                          std::chrono::nanoseconds timeout);

/// select() over arms built at run time, giving up at `deadline` (nullopt:
/// never; one already past: nullopt unless an arm is ready now). For
/// callers that combine their own arms with a caller's (the websocket's
/// recv_or).
std::optional<std::size_t> select_until(
    std::span<const select_arm> arms,
    std::optional<std::chrono::steady_clock::time_point> deadline);

}  // namespace smarm
