#include <smarm/introspect.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "names.hpp"
#include "runtime_impl.hpp"

namespace smarm::introspect {

namespace {

std::optional<actor_info> read_slot(internal::slot& sl, std::optional<std::uint32_t> want_gen) {
    using internal::state_word;
    actor_info a;
    {
        std::lock_guard g(sl.cold_mu);
        std::uint64_t w = sl.word.load();
        auto st = state_word::state_of(w);
        if (st == internal::actor_state::vacant) return std::nullopt;
        std::uint32_t gen = state_word::gen_of(w);
        if (want_gen && *want_gen != gen) return std::nullopt;
        a.id = pid{sl.index, gen};
        a.state = internal::to_string(st);
        if (st == internal::actor_state::parked) {
            a.wait = detail::to_string(
                static_cast<detail::wait_reason>(sl.wait_why.load(std::memory_order_relaxed)));
            a.wait_epoch = state_word::epoch_of(w);
        }
        a.parent = sl.parent;
        if (sl.ext) {
            a.joiners = static_cast<std::uint32_t>(sl.ext->joiners.size());
            a.monitors = static_cast<std::uint32_t>(sl.ext->monitors.size());
            a.links = static_cast<std::uint32_t>(sl.ext->links.size());
            a.trap_exit = sl.ext->trap.has_value();
        }
        a.stop_requested = sl.stop_pending(gen);
    }
    a.overruns = sl.overruns.load(std::memory_order_relaxed);
    a.messages_received = sl.messages.load(std::memory_order_relaxed);
    a.cpu_ns = static_cast<std::uint64_t>(
        static_cast<double>(sl.cpu_ticks.load(std::memory_order_relaxed)) /
        internal::ticks_per_ns());
    return a;
}

/// Adds an inbox of `a` (registered or a group's): its depth and oldest
/// message.
void add_inbox(actor_info& a, const detail::queue_probe& q, std::uint64_t now) {
    a.mailbox_depth = a.mailbox_depth.value_or(0) + q.depth;
    std::uint64_t age = 0;
    if (q.depth != 0 && now > q.oldest)
        age = static_cast<std::uint64_t>(static_cast<double>(now - q.oldest) /
                                         internal::ticks_per_ns());
    a.mailbox_age_ns = std::max(a.mailbox_age_ns.value_or(0), age);
}

}  // namespace

snapshot take_snapshot() {
    snapshot s;
    detail::runtime_impl* rt = internal::active_runtime();
    if (rt == nullptr) return s;
    auto& slots = rt->slots();
    const std::size_t n = slots.high_water();
    for (std::size_t i = 0; i < n; ++i)
        if (auto a = read_slot(*slots.at(static_cast<std::uint32_t>(i)), std::nullopt))
            s.actors.push_back(std::move(*a));
    // Names and mailbox depths, from one pass over the registry.
    std::map<pid, std::size_t> at;
    for (std::size_t i = 0; i < s.actors.size(); ++i)
        at[s.actors[i].id] = i;
    const std::uint64_t now = detail::ticks();
    for (auto& [holder, nm, queue] : rt->names().all()) {
        auto it = at.find(holder);
        if (it == at.end()) continue;
        s.actors[it->second].names.push_back(nm);
        add_inbox(s.actors[it->second], queue, now);
    }
    for (auto& [holder, g, queue] : rt->groups().all()) {
        auto it = at.find(holder);
        if (it == at.end()) continue;
        s.actors[it->second].groups.push_back(g);
        add_inbox(s.actors[it->second], queue, now);
    }
    s.stats = rt->stats();
    return s;
}

runtime_stats stats() {
    detail::runtime_impl* rt = internal::active_runtime();
    return rt == nullptr ? runtime_stats{} : rt->stats();
}

std::optional<actor_info> info(pid p) {
    detail::runtime_impl* rt = internal::active_runtime();
    if (rt == nullptr) return std::nullopt;
    internal::slot* sl = rt->slots().at(p.index);
    if (sl == nullptr) return std::nullopt;
    auto a = read_slot(*sl, p.generation);
    if (a) {
        const std::uint64_t now = detail::ticks();
        for (auto& [nm, queue] : rt->names().names_of(*rt, p)) {
            a->names.push_back(nm);
            add_inbox(*a, queue, now);
        }
        for (auto& [holder, g, queue] : rt->groups().all()) {
            if (holder != p) continue;
            a->groups.push_back(g);
            add_inbox(*a, queue, now);
        }
    }
    return a;
}

std::vector<tree_node> tree() {
    snapshot s = take_snapshot();
    std::map<pid, std::size_t> at;
    for (std::size_t i = 0; i < s.actors.size(); ++i)
        at[s.actors[i].id] = i;
    std::map<pid, std::vector<std::size_t>> kids;
    std::vector<std::size_t> roots;
    std::vector<bool> orphan(s.actors.size(), false);
    for (std::size_t i = 0; i < s.actors.size(); ++i) {
        const pid parent = s.actors[i].parent;
        if (parent.valid() && at.count(parent)) {
            kids[parent].push_back(i);
        } else {
            orphan[i] = parent.valid();
            roots.push_back(i);
        }
    }
    // Build bottom-up with an explicit stack (deep trees must not recurse).
    std::vector<tree_node> forest;
    struct frame {
        std::size_t idx;
        tree_node* out;
    };
    for (std::size_t r : roots) {
        forest.push_back(tree_node{s.actors[r], orphan[r], {}});
        std::vector<frame> stack{{r, &forest.back()}};
        while (!stack.empty()) {
            frame f = stack.back();
            stack.pop_back();
            auto it = kids.find(s.actors[f.idx].id);
            if (it == kids.end()) continue;
            f.out->children.reserve(it->second.size());
            for (std::size_t c : it->second)
                f.out->children.push_back(tree_node{s.actors[c], false, {}});
            for (std::size_t k = 0; k < it->second.size(); ++k)
                stack.push_back({it->second[k], &f.out->children[k]});
        }
    }
    return forest;
}

std::string render_tree(const std::vector<tree_node>& forest) {
    std::ostringstream os;
    struct item {
        const tree_node* n;
        int depth;
    };
    std::vector<item> stack;
    for (auto it = forest.rbegin(); it != forest.rend(); ++it)
        stack.push_back({&*it, 0});
    while (!stack.empty()) {
        item i = stack.back();
        stack.pop_back();
        os << std::string(static_cast<std::size_t>(i.depth) * 2, ' ') << i.n->actor.id << ' '
           << i.n->actor.state;
        for (auto& nm : i.n->actor.names)
            os << ' ' << nm;
        if (i.n->orphan) os << " (orphan)";
        os << '\n';
        for (auto it = i.n->children.rbegin(); it != i.n->children.rend(); ++it)
            stack.push_back({&*it, i.depth + 1});
    }
    return os.str();
}

}  // namespace smarm::introspect
