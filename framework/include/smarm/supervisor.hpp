#pragma once
// smarm::supervisor — keeps child actors running (OTP supervisor).
//
//     auto sup = smarm::start_supervisor({.strategy = smarm::restart_strategy::one_for_one},
//                                        {{"kv", [] { run_kv(); }}, {"web", [] { run_web(); }}});
//
// Children are started in order, each as an actor the supervisor monitors.
// When one ends:
//   restart policy  permanent: always restarted; transient: restarted only
//                   after an abnormal end (panic or stopped by someone else);
//                   temporary: never restarted (removed).
//   strategy        one_for_one: only that child restarts; one_for_all: all
//                   others are stopped (reverse start order) and all restart
//                   in order; rest_for_one: the children started after it are
//                   stopped (reverse order) and those restart with it.
//   intensity       more than max_restarts restarts within period: the
//                   supervisor gives up, stops the survivors in reverse start
//                   order and ends with supervisor_gave_up (abnormal, so a
//                   parent supervisor sees it).
// Children may be added at run time (start_child), bounded by max_children
// (0 = no bound; past it start_child fails with a clear error): this is how
// connection actors are supervised. Stopping the supervisor (request_stop)
// stops its children in reverse start order first.
//
// Thread safety: the ref functions may be called from any actor.

#include <smarm/channel.hpp>
#include <smarm/monitor.hpp>
#include <smarm/pid.hpp>
#include <smarm/runtime.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace smarm {

enum class restart_policy { permanent, transient, temporary };
enum class restart_strategy { one_for_one, one_for_all, rest_for_one };

/// How to run one child. `body` is called afresh for every (re)start.
/// The supervisor starts the next child once this one runs; a child whose
/// start is more than running (a nested supervisor starting its own
/// children, a server binding its port) uses `init_body` instead of `body`
/// and calls `started()` when it is ready (OTP's init_ack). A child that
/// ends before calling it counts as started.
struct child_spec {
    std::string id;
    std::function<void()> body;
    restart_policy restart = restart_policy::permanent;
    std::function<void(const std::function<void()>& started)> init_body = {};
};

/// | key | meaning | default |
/// |---|---|---|
/// | `strategy` | which siblings restart with a failed child | one_for_one |
/// | `max_restarts` | restarts tolerated within `period` | 3 |
/// | `period` | the intensity window | 5 s |
/// | `max_children` | bound on live children (0 = none) | 0 |
struct supervisor_options {
    restart_strategy strategy = restart_strategy::one_for_one;
    unsigned max_restarts = 3;
    std::chrono::nanoseconds period = std::chrono::seconds(5);
    std::size_t max_children = 0;
};

/// Thrown out of a supervisor that exceeded its restart intensity.
class supervisor_gave_up : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// Process-wide counters (metrics read them).
struct supervisor_counters {
    std::uint64_t restarts = 0;
    std::uint64_t give_ups = 0;
};
supervisor_counters supervisor_totals() noexcept;

struct children_count {
    std::size_t specs = 0;   ///< children known (live or awaiting restart)
    std::size_t active = 0;  ///< children running now
};

namespace detail {
struct start_child_req {
    child_spec spec;
    sender<std::variant<pid, std::string>> reply;  // pid, or an error message
};
struct start_child_cast {
    // A constructor, not an aggregate: built in place in the variant
    // (clang 14 has no parenthesized aggregate initialization).
    explicit start_child_cast(child_spec&& s) : spec(std::move(s)) {}
    child_spec spec;
};
struct count_req {
    sender<children_count> reply;
};
struct which_req {
    sender<std::vector<std::pair<std::string, pid>>> reply;
};
using supervisor_msg = std::variant<start_child_req, count_req, which_req, start_child_cast>;
void supervise(supervisor_options opts, std::vector<child_spec> children,
               receiver<supervisor_msg> control, const std::function<void()>& started = {});
}  // namespace detail

/// A running supervisor.
struct supervisor_ref {
    pid id;
    sender<detail::supervisor_msg> control;
};

/// Spawns a supervisor actor that starts `children` in order.
supervisor_ref start_supervisor(supervisor_options opts, std::vector<child_spec> children);

/// A child that is itself a supervisor of `children` (a supervision tree):
/// each (re)start supervises fresh copies of the specs. Its give-up ends
/// the child abnormally, so the parent applies its own strategy; stopping
/// it stops its children in reverse start order first. Nested supervisors
/// take no start_child requests (build such a supervisor with
/// start_supervisor and supervise its users instead).
child_spec supervisor_child(std::string id, supervisor_options opts,
                            std::vector<child_spec> children,
                            restart_policy restart = restart_policy::permanent);

/// Adds and starts a child. Returns its pid, or throws std::runtime_error
/// naming the reason (max_children reached, supervisor down, timeout).
pid start_child(const supervisor_ref& sup, child_spec spec,
                std::chrono::nanoseconds timeout = std::chrono::seconds(5));
/// Asks the supervisor to add and start a child and returns at once (no
/// round trip; false when the supervisor is gone). A child past
/// max_children is dropped: its function never runs and is destroyed in
/// the supervisor. For a caller that admits children itself (an HTTP
/// listener counting its connections) and must not wait per child. The
/// supervisor does not wait for such a child to run either (unless it has
/// an init_body): children are listed in cast order but may begin to run
/// in another on several schedulers.
bool start_child_async(const supervisor_ref& sup, child_spec spec);
children_count count_children(const supervisor_ref& sup,
                              std::chrono::nanoseconds timeout = std::chrono::seconds(5));
std::vector<std::pair<std::string, pid>> which_children(
    const supervisor_ref& sup, std::chrono::nanoseconds timeout = std::chrono::seconds(5));

}  // namespace smarm
