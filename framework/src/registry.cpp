// The per-runtime name registry (registry.hpp).

#include <smarm/registry.hpp>
#include <smarm/trace.hpp>

#include <mutex>
#include <stdexcept>
#include <string>

#include "names.hpp"
#include "runtime_impl.hpp"

namespace smarm {

const char* to_string(name_error e) noexcept {
    switch (e) {
        case name_error::unresolved:
            return "unresolved";
        case name_error::dead:
            return "dead";
        case name_error::no_channel:
            return "no_channel";
        case name_error::closed:
            return "closed";
        case name_error::no_member:
            return "no_member";
    }
    return "?";
}

namespace detail {

using namespace smarm::internal;

bool registry_bind(std::string_view n, std::type_index type, std::shared_ptr<void> tx,
                   queue_prober probe) {
    return registry_bind_for(current_pid("smarm::register_name"), n, type, std::move(tx), probe);
}

bool registry_bind_for(pid me, std::string_view n, std::type_index type, std::shared_ptr<void> tx,
                       queue_prober probe) {
    runtime_impl& rt = running_runtime("smarm::register_name");
    registry& reg = rt.names();
    std::shared_ptr<void> old;  // destroyed outside the lock
    std::unique_lock g(reg.mu);
    auto it = reg.bindings.find(std::string(n));
    if (it != reg.bindings.end()) {
        if (registry::alive(rt, it->second.holder)) return false;
        old = std::move(it->second.tx);
        reg.bindings.erase(it);
    }
    reg.bindings.emplace(std::string(n), registry::binding{me, type, std::move(tx), probe});
    g.unlock();
    detail::trace_name(me, n);  // after the registry's lock (trace.cpp's lock order)
    return true;
}

name_lookup registry_resolve(std::string_view n, std::type_index type) {
    runtime_impl& rt = running_runtime("smarm registry");
    registry& reg = rt.names();
    name_lookup out;
    std::shared_ptr<void> pruned;  // destroyed outside the lock
    std::lock_guard g(reg.mu);
    auto it = reg.bindings.find(std::string(n));
    if (it == reg.bindings.end()) {
        out.error = name_error::unresolved;
        return out;
    }
    if (!registry::alive(rt, it->second.holder)) {
        pruned = std::move(it->second.tx);
        reg.bindings.erase(it);
        out.error = name_error::dead;
        return out;
    }
    if (it->second.type != type) {
        out.error = name_error::no_channel;
        return out;
    }
    out.found = resolved_name{it->second.holder, it->second.tx};
    return out;
}

bool registry_unbind(std::string_view n) {
    runtime_impl& rt = running_runtime("smarm::unregister");
    registry& reg = rt.names();
    std::shared_ptr<void> old;
    std::lock_guard g(reg.mu);
    auto it = reg.bindings.find(std::string(n));
    if (it == reg.bindings.end()) return false;
    old = std::move(it->second.tx);
    reg.bindings.erase(it);
    return true;
}

}  // namespace detail

namespace internal {

bool registry::alive(runtime_impl& rt, pid p) noexcept {
    slot* sl = rt.slots().at(p.index);
    return sl != nullptr && sl->holds(p);
}

std::vector<std::pair<std::string, detail::queue_probe>> registry::names_of(runtime_impl& rt,
                                                                            pid p) {
    (void)rt;
    std::vector<std::pair<std::string, detail::queue_probe>> out;
    std::lock_guard g(mu);
    for (auto& [n, b] : bindings)
        if (b.holder == p) out.emplace_back(n, b.probe(b.tx.get()));
    return out;
}

std::vector<std::tuple<pid, std::string, detail::queue_probe>> registry::all() {
    std::vector<std::tuple<pid, std::string, detail::queue_probe>> out;
    std::lock_guard g(mu);
    for (auto& [n, b] : bindings)
        out.emplace_back(b.holder, n, b.probe(b.tx.get()));
    return out;
}

void registry::clear() noexcept {
    std::unordered_map<std::string, binding> old;
    {
        std::lock_guard g(mu);
        old.swap(bindings);
    }
}

}  // namespace internal
}  // namespace smarm
