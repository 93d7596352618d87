#pragma once
// The runtime's name tables: the registry (name -> typed inbox, registry.cpp)
// and the process groups (group -> members, pg.cpp). Each is guarded by its
// own mutex; a channel's lock may be taken under either (queue probes),
// never the reverse. Both are emptied at the end of a run (they hold
// senders).

#include <smarm/pid.hpp>
#include <smarm/registry.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "internal.hpp"

namespace smarm::internal {

class runtime_impl;

/// Name -> typed inbox bindings (registry.cpp). Guarded by mu; a channel's
/// lock may be taken under it (queue probes), never the reverse.
struct registry {
    struct binding {
        pid holder;
        std::type_index type;
        std::shared_ptr<void> tx;  ///< a sender<M>
        detail::queue_prober probe;
    };
    std::mutex mu;
    std::unordered_map<std::string, binding> bindings;  // guarded by mu

    static bool alive(runtime_impl& rt, pid p) noexcept;
    /// (name, its queue) of every binding held by `p`.
    std::vector<std::pair<std::string, detail::queue_probe>> names_of(runtime_impl& rt, pid p);
    /// (holder, name, its queue) of every binding.
    std::vector<std::tuple<pid, std::string, detail::queue_probe>> all();
    void clear() noexcept;
};

/// Process groups (pg.cpp). Guarded by mu.
struct process_groups {
    struct member {
        pid holder;
        std::type_index type;
        std::shared_ptr<void> tx;  ///< a sender<M>
        detail::queue_prober probe;
    };
    std::mutex mu;
    std::unordered_map<std::string, std::vector<member>> groups;  // guarded by mu
    std::size_t cursor = 0;                                       // guarded by mu
    /// (holder, group, its inbox's queue) of every membership.
    std::vector<std::tuple<pid, std::string, detail::queue_probe>> all();
    /// Removes `p` from every group (finalize of an actor that joined one).
    void evict(pid p);
    void clear() noexcept;
};

}  // namespace smarm::internal
