// Monitors, links and exit trapping.
//
// All of it lives in the cold part of the slots (under each slot's cold_mu),
// never holding two slots' locks at once: link() locks the target, then
// itself; finalize takes its own lists under its own lock and then visits
// each linked slot alone. The window this leaves (a link made while the
// target finalizes) can only leave a stale pid in a link list, which is
// inert: stopping a stale pid is a no-op.

#include <smarm/monitor.hpp>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "runtime_impl.hpp"

namespace smarm {

namespace internal {

namespace {

down_reason reason_of(exit_kind k) noexcept {
    switch (k) {
        case exit_kind::exit:
            return down_reason::exit;
        case exit_kind::panic:
            return down_reason::panic;
        case exit_kind::stopped:
            return down_reason::stopped;
    }
    return down_reason::exit;
}

struct actor_ctx {
    runtime_impl* rt;
    slot* self;
    pid me;
};

actor_ctx self_or_throw(const char* call) {
    scheduler& s = actor_scheduler(call);
    return {s.rt, s.current, pid{s.current->index, s.current_gen}};
}

}  // namespace

void notify_exit(runtime_impl& rt, scheduler&, pid who, exit_kind kind, std::exception_ptr error,
                 std::vector<std::pair<std::uint64_t, sender<down>>>& monitors,
                 std::vector<pid>& links) {
    const down_reason reason = reason_of(kind);
    for (auto& [id, to] : monitors)
        (void)to.send(down{id, who, reason, error});
    for (pid other : links) {
        slot* sl = rt.slots().at(other.index);
        if (sl == nullptr) continue;
        std::optional<sender<exit_signal>> trap;
        {
            std::lock_guard g(sl->cold_mu);
            if (!sl->holds(other) || !sl->ext) continue;
            auto& l = sl->ext->links;
            l.erase(std::remove(l.begin(), l.end(), who), l.end());
            trap = sl->ext->trap;
        }
        if (trap)
            (void)trap->send(exit_signal{who, reason, error});
        else if (reason != down_reason::exit)
            rt.request_stop(other);
    }
}

}  // namespace internal

std::uint64_t monitor(pid p, sender<down> to) {
    auto c = internal::self_or_throw("smarm::monitor");
    const std::uint64_t id = c.rt->next_monitor_id();
    bool armed = false;
    if (internal::slot* sl = c.rt->slots().at(p.index)) {
        std::lock_guard g(sl->cold_mu);
        if (sl->holds(p)) {
            sl->ext_make().monitors.emplace_back(id, to);
            armed = true;
        }
    }
    if (!armed) (void)to.send(down{id, p, down_reason::noproc, nullptr});
    return id;
}

monitor_ref monitor(pid p) {
    auto [tx, rx] = channel<down>();
    const std::uint64_t id = monitor(p, std::move(tx));
    return monitor_ref{id, p, std::move(rx)};
}

bool demonitor(pid p, std::uint64_t id) {
    auto c = internal::self_or_throw("smarm::demonitor");
    internal::slot* sl = c.rt->slots().at(p.index);
    if (sl == nullptr) return false;
    std::lock_guard g(sl->cold_mu);
    if (!sl->holds(p) || !sl->ext) return false;
    auto& m = sl->ext->monitors;
    auto it = std::find_if(m.begin(), m.end(), [&](auto& e) { return e.first == id; });
    if (it == m.end()) return false;
    m.erase(it);
    return true;
}

bool link(pid p) {
    auto c = internal::self_or_throw("smarm::link");
    if (p == c.me) return true;
    bool alive = false;
    if (internal::slot* sl = c.rt->slots().at(p.index)) {
        std::lock_guard g(sl->cold_mu);
        if (sl->holds(p)) {
            alive = true;
            auto& l = sl->ext_make().links;
            if (std::find(l.begin(), l.end(), c.me) == l.end()) l.push_back(c.me);
        }
    }
    std::optional<sender<exit_signal>> trap;
    {
        std::lock_guard g(c.self->cold_mu);
        if (alive) {
            auto& l = c.self->ext_make().links;
            if (std::find(l.begin(), l.end(), p) == l.end()) l.push_back(p);
        } else {
            if (c.self->ext) trap = c.self->ext->trap;
        }
    }
    if (!alive && trap) (void)trap->send(exit_signal{p, down_reason::noproc, nullptr});
    return alive;
}

void unlink(pid p) {
    auto c = internal::self_or_throw("smarm::unlink");
    if (internal::slot* sl = c.rt->slots().at(p.index)) {
        std::lock_guard g(sl->cold_mu);
        if (sl->holds(p) && sl->ext) {
            auto& l = sl->ext->links;
            l.erase(std::remove(l.begin(), l.end(), c.me), l.end());
        }
    }
    std::lock_guard g(c.self->cold_mu);
    if (!c.self->ext) return;
    auto& l = c.self->ext->links;
    l.erase(std::remove(l.begin(), l.end(), p), l.end());
}

receiver<exit_signal> trap_exits() {
    auto c = internal::self_or_throw("smarm::trap_exits");
    auto [tx, rx] = channel<exit_signal>();
    std::lock_guard g(c.self->cold_mu);
    c.self->ext_make().trap = std::move(tx);
    return std::move(rx);
}

void untrap_exits() {
    auto c = internal::self_or_throw("smarm::untrap_exits");
    std::lock_guard g(c.self->cold_mu);
    if (c.self->ext) c.self->ext->trap.reset();
}

}  // namespace smarm
