#pragma once
// smarm::introspect — a live view of the actors of the running runtime.
//
// Reads each slot's state word lock-free and its cold part under the slot's
// own small lock: there is no stop-the-world, so a snapshot is coherent per
// actor, not across actors. The format is versioned (snapshot::version):
// fields are only ever added.
//
// Thread safety: callable from any thread while a runtime runs (from a
// foreign thread it reads the most recently started runtime).

#include <smarm/pid.hpp>
#include <smarm/stats.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace smarm::introspect {

inline constexpr std::uint32_t format_version = 1;

/// One actor, as seen at one instant.
struct actor_info {
    pid id;
    pid parent;                      ///< invalid for the root
    std::string state;               ///< queued, running, running_notified, parked, done
    std::vector<std::string> names;  ///< registered names (empty until the registry)
    std::vector<std::string> groups;  ///< process groups it is a member of
    bool trap_exit = false;
    std::uint32_t monitors = 0;  ///< monitors watching it
    std::uint32_t links = 0;
    std::uint32_t joiners = 0;                   ///< actors parked in join() on it
    /// Of its registered and process-group inboxes, if it has any.
    std::optional<std::uint64_t> mailbox_depth;
    /// How long the oldest message queued in those inboxes has
    /// waited (0 when they are empty; nullopt without one). Stamped at the
    /// sender's last clock read: exact to about a timeslice.
    std::optional<std::uint64_t> mailbox_age_ns;
    std::uint64_t overruns = 0;                  ///< slices overrun by more than a full slice
    std::uint64_t messages_received = 0;
    bool stop_requested = false;
    /// While parked: what it waits for ("channel", "call reply", "io read",
    /// "timer", "mutex", "join", "select", "blocking pool", ...); "" when
    /// not parked.
    std::string wait;
    /// The wait's epoch: the same value in two snapshots means the actor
    /// stayed parked in between (how long it has waited, at the polling
    /// rate, without a clock read per park).
    std::uint32_t wait_epoch = 0;
    /// On-CPU time of this incarnation, sampled at its observation points'
    /// clock reads (an actor that parks before its first read in a run is
    /// not charged for that run): compare actors, or one actor over time.
    std::uint64_t cpu_ns = 0;
};

struct snapshot {
    std::uint32_t version = format_version;
    std::vector<actor_info> actors;
    runtime_stats stats;
};

/// Every live actor of the running runtime (empty when none runs).
snapshot take_snapshot();
/// The running runtime's counters alone (no actor walk; empty when none
/// runs): per-scheduler utilisation for a page that polls it.
runtime_stats stats();
/// One actor, or nullopt when `p` is not live (stale or finished and reaped).
std::optional<actor_info> info(pid p);

/// A supervisor's child as its supervisor last published it. Only
/// permanent and transient children are listed: temporary ones (connection
/// actors, thousands) are counted in supervisor_info::temporary.
struct supervisor_child_info {
    std::string id;  ///< the child_spec's id
    pid actor;       ///< its current incarnation (invalid while not running)
    bool running = false;
    std::string restart;         ///< permanent, transient
    std::uint64_t restarts = 0;  ///< times this child was restarted
    std::string last_exit;       ///< how its last incarnation ended ("" before any)
};

/// A running supervisor: its policy and restart history.
struct supervisor_info {
    pid id;
    std::string strategy;  ///< one_for_one, one_for_all, rest_for_one
    std::uint32_t max_restarts = 0;
    std::uint64_t period_ns = 0;
    std::uint64_t restarts = 0;   ///< restarts it has made since it started
    std::uint64_t active = 0;     ///< children running now
    std::uint64_t temporary = 0;  ///< of those, temporary ones
    std::vector<supervisor_child_info> children;
};

/// Every running supervisor (process-wide; a supervisor publishes its
/// children when they start or end, under a lock of its own, so reading
/// them never waits on the supervisor's actor).
std::vector<supervisor_info> supervisors();

/// A node of the parentage forest.
struct tree_node {
    actor_info actor;
    bool orphan = false;  ///< its parent is gone: re-rooted here
    std::vector<tree_node> children;
};
/// The parentage forest: roots are the root actor and orphans.
std::vector<tree_node> tree();
/// An indented text rendering of tree().
std::string render_tree(const std::vector<tree_node>& forest);

}  // namespace smarm::introspect
