// Process groups (pg.hpp). One map per runtime under one lock; members are
// checked for liveness on every read (a dead one is never returned) and
// evicted eagerly by finalize (pg_evict) for actors that ever joined.

#include <smarm/pg.hpp>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

#include "names.hpp"
#include "runtime_impl.hpp"

namespace smarm::detail {

using namespace smarm::internal;

void pg_join(std::string_view g, std::type_index type, std::shared_ptr<void> tx,
             queue_prober probe) {
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr)
        throw std::logic_error("smarm::join: called outside an actor");
    pid me{s->current->index, s->current_gen};
    runtime_impl& rt = *s->rt;
    s->current->pg_member = true;
    std::shared_ptr<void> old;
    std::lock_guard lk(rt.groups().mu);
    auto& members = rt.groups().groups[std::string(g)];
    for (auto& m : members) {
        if (m.holder == me) {
            if (m.type != type)
                throw std::logic_error("smarm::join: group \"" + std::string(g) +
                                       "\" carries another message type");
            old = std::exchange(m.tx, std::move(tx));
            m.probe = probe;
            return;
        }
    }
    if (!members.empty() && members.front().type != type)
        throw std::logic_error("smarm::join: group \"" + std::string(g) +
                               "\" carries another message type");
    members.push_back(process_groups::member{me, type, std::move(tx), probe});
}

bool pg_leave(std::string_view g) {
    pid me = current_pid("smarm::leave");
    runtime_impl& rt = running_runtime("smarm::leave");
    std::shared_ptr<void> old;
    std::lock_guard lk(rt.groups().mu);
    auto it = rt.groups().groups.find(std::string(g));
    if (it == rt.groups().groups.end()) return false;
    auto& v = it->second;
    auto m = std::find_if(v.begin(), v.end(), [&](auto& x) { return x.holder == me; });
    if (m == v.end()) return false;
    old = std::move(m->tx);
    v.erase(m);
    return true;
}

std::vector<pid> pg_members(std::string_view g, std::type_index type) {
    runtime_impl& rt = running_runtime("smarm::members");
    std::vector<pid> out;
    std::lock_guard lk(rt.groups().mu);
    auto it = rt.groups().groups.find(std::string(g));
    if (it == rt.groups().groups.end()) return out;
    for (auto& m : it->second)
        if (m.type == type && registry::alive(rt, m.holder)) out.push_back(m.holder);
    return out;
}

std::vector<resolved_name> pg_all(std::string_view g, std::type_index type) {
    runtime_impl& rt = running_runtime("smarm::broadcast");
    std::vector<resolved_name> out;
    std::lock_guard lk(rt.groups().mu);
    auto it = rt.groups().groups.find(std::string(g));
    if (it == rt.groups().groups.end()) return out;
    out.reserve(it->second.size());
    for (auto& m : it->second)
        if (m.type == type && registry::alive(rt, m.holder)) out.push_back({m.holder, m.tx});
    return out;
}

std::optional<resolved_name> pg_pick(std::string_view g, std::type_index type) {
    runtime_impl& rt = running_runtime("smarm::dispatch");
    auto& pg = rt.groups();
    std::lock_guard lk(pg.mu);
    auto it = pg.groups.find(std::string(g));
    if (it == pg.groups.end()) return std::nullopt;
    auto& v = it->second;
    for (std::size_t tries = 0; tries < v.size(); ++tries) {
        auto& m = v[pg.cursor++ % v.size()];
        if (m.type == type && registry::alive(rt, m.holder)) return resolved_name{m.holder, m.tx};
    }
    return std::nullopt;
}

}  // namespace smarm::detail

namespace smarm::internal {

void process_groups::evict(pid p) {
    std::vector<std::shared_ptr<void>> dropped;  // destroyed outside the lock
    std::lock_guard lk(mu);
    for (auto& [name, v] : groups) {
        for (auto& m : v)
            if (m.holder == p) dropped.push_back(std::move(m.tx));
        v.erase(std::remove_if(v.begin(), v.end(), [&](auto& m) { return m.holder == p; }),
                v.end());
    }
}

std::vector<std::tuple<pid, std::string, detail::queue_probe>> process_groups::all() {
    std::vector<std::tuple<pid, std::string, detail::queue_probe>> out;
    std::lock_guard lk(mu);
    for (auto& [name, v] : groups)
        for (auto& m : v)
            out.emplace_back(m.holder, name, m.probe(m.tx.get()));
    return out;
}

void process_groups::clear() noexcept {
    std::unordered_map<std::string, std::vector<member>> old;
    std::lock_guard lk(mu);
    old.swap(groups);
}

}  // namespace smarm::internal
