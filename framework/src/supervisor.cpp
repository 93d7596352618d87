// The supervisor loop (supervisor.hpp).
//
// The supervisor monitors each child into one `down` channel and selects it
// above its control channel. Children it stops itself (for one_for_all /
// rest_for_one, give-up or its own stop) are waited for by monitor id with
// a selective receive, so their downs are never mistaken for failures.

#include <smarm/introspect.hpp>
#include <smarm/select.hpp>
#include <smarm/supervisor.hpp>

#include <algorithm>
#include <deque>
#include <iterator>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "trace_hooks.hpp"

namespace smarm {

namespace {
std::atomic<std::uint64_t> g_restarts{0};
std::atomic<std::uint64_t> g_give_ups{0};

struct child {
    explicit child(child_spec&& s) : spec(std::move(s)) {}  // emplaced (supervisor_state::add)
    child_spec spec;
    pid id;
    std::uint64_t monitor = 0;
    bool running = false;
    std::uint64_t restarts = 0;
    std::string last_exit;
};

/// What a supervisor publishes for introspection::supervisors(): written by
/// the supervisor's actor under `mu` when a listed child starts or ends,
/// copied by readers under it (nothing waits on the actor).
struct published {
    std::mutex mu;
    introspect::supervisor_info info;  // guarded by mu
};

/// The running supervisors, by pid (guarded by g_published_mu: taken when
/// a supervisor starts or ends and by readers, never with a published::mu).
std::mutex g_published_mu;
std::map<pid, std::shared_ptr<published>> g_published;

const char* strategy_name(restart_strategy s) {
    switch (s) {
        case restart_strategy::one_for_one:
            return "one_for_one";
        case restart_strategy::one_for_all:
            return "one_for_all";
        case restart_strategy::rest_for_one:
            return "rest_for_one";
    }
    return "?";
}

/// How an incarnation ended, for supervisor_child_info::last_exit.
std::string exit_text(const down& d) {
    switch (d.reason) {
        case down_reason::exit:
            return "exit";
        case down_reason::stopped:
            return "stopped";
        case down_reason::noproc:
            return "noproc";
        case down_reason::panic:
            break;
    }
    std::string what = "panic";
    if (d.error) {
        try {
            std::rethrow_exception(d.error);
        } catch (const std::exception& e) {
            what += ": ";
            what += e.what();
        } catch (...) {
            what += ": a non-std::exception";
        }
    }
    constexpr std::size_t cap = 240;  // a page's cell, not the whole story
    if (what.size() > cap) what.resize(cap);
    return what;
}
}  // namespace

supervisor_counters supervisor_totals() noexcept {
    return {g_restarts.load(std::memory_order_relaxed), g_give_ups.load(std::memory_order_relaxed)};
}

std::vector<introspect::supervisor_info> introspect::supervisors() {
    std::vector<std::shared_ptr<published>> all;
    {
        std::lock_guard g(g_published_mu);
        for (auto& [id, p] : g_published)
            all.push_back(p);
    }
    std::vector<supervisor_info> out;
    out.reserve(all.size());
    for (auto& p : all) {
        std::lock_guard g(p->mu);
        out.push_back(p->info);
    }
    return out;
}

namespace detail {

using namespace smarm::internal;

namespace {

class supervisor_state {
  public:
    supervisor_state(supervisor_options o, receiver<down> downs, sender<down> downs_tx)
        : opts_(o), downs_(std::move(downs)), downs_tx_(std::move(downs_tx)) {
        auto& in = pub_->info;
        in.id = current_pid_or_invalid();
        in.strategy = strategy_name(o.strategy);
        in.max_restarts = o.max_restarts;
        in.period_ns = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(o.period).count());
        std::lock_guard g(g_published_mu);
        g_published[in.id] = pub_;
    }
    ~supervisor_state() {
        std::lock_guard g(g_published_mu);
        if (auto it = g_published.find(pub_->info.id);
            it != g_published.end() && it->second == pub_)
            g_published.erase(it);
    }
    supervisor_state(const supervisor_state&) = delete;
    supervisor_state& operator=(const supervisor_state&) = delete;

    // Children in start order (a list: erasing a temporary child is O(1)),
    // and the running ones by monitor id, so a down costs O(1) however many
    // siblings there are (a connection supervisor has thousands).
    using child_list = std::list<child>;
    child_list children;

    /// How add() starts a child: `ordered` waits until it runs (OTP's
    /// init ack), so children start in order and start_child's caller gets
    /// a started child; `cast` (start_child_async: nobody waits for the
    /// outcome) returns once the child is spawned and monitored, unless it
    /// has an init_body, whose ack it still waits for.
    enum class start_mode { ordered, cast };

    /// Appends a child and starts it.
    child_list::iterator add(child_spec&& spec, start_mode mode = start_mode::ordered) {
        children.emplace_back(std::move(spec));
        auto it = std::prev(children.end());
        start(it, mode);
        return it;
    }

    void start(child_list::iterator it, start_mode mode = start_mode::ordered) {
        child& c = *it;
        const bool temporary = c.spec.restart == restart_policy::temporary;
        // A connection's supervisor starts thousands of children a second:
        // the cast of one without init skips the ack (a channel, a park and
        // a switch back), and a temporary child, never restarted, takes its
        // body instead of a copy (a std::function holding shared_ptrs).
        const bool wait_ack = mode == start_mode::ordered || c.spec.init_body;
        std::optional<receiver<int>> ack_rx;
        std::optional<sender<int>> ack_tx;
        if (wait_ack) {
            auto [tx, rx] = channel<int>();
            ack_tx.emplace(std::move(tx));
            ack_rx.emplace(std::move(rx));
        }
        std::function<void()> body = temporary ? std::move(c.spec.body) : c.spec.body;
        {
            // no_preempt: the child must not run (spawn is work-first)
            // before its monitor is installed, or an instant failure would
            // read as noproc and lose its outcome.
            no_preempt hold;
            auto h = spawn([body = std::move(body), init = c.spec.init_body,
                            ack = std::move(ack_tx)] {
                if (!init) {
                    if (ack) (void)ack->send(1);
                    body();
                    return;
                }
                // The ack sender dies with this actor, so a child that ends
                // before acking still releases the supervisor.
                bool acked = false;
                init([&] {
                    if (!std::exchange(acked, true)) (void)ack->send(1);
                });
            });
            c.id = h.id();
            c.monitor = monitor(c.id, downs_tx_);
            c.running = true;
            running_by_monitor_.emplace(c.monitor, it);
            h.detach();
        }
        publish(!temporary);
        if (ack_rx) (void)ack_rx->recv();
    }

    // Stops a running child and waits for its down.
    void stop(child& c) {
        if (!c.running) return;
        request_stop(c.id);
        const std::uint64_t id = c.monitor;
        (void)downs_.recv_match([id](const down& d) { return d.monitor_id == id; });
        c.running = false;
        running_by_monitor_.erase(id);
        const bool listed = c.spec.restart != restart_policy::temporary;
        if (listed) c.last_exit = "stopped by its supervisor";
        publish(listed);
    }

    /// Stops the children from `from` to the end, last first.
    void stop_all_reverse(child_list::iterator from) {
        for (auto it = children.end(); it != from;)
            stop(*--it);
    }
    void stop_all_reverse() { stop_all_reverse(children.begin()); }

    // Records a restart; false when the intensity is exceeded.
    bool note_restart() {
        auto now = detail::clock::now();
        restarts_.push_back(now);
        while (!restarts_.empty() && now - restarts_.front() > opts_.period)
            restarts_.pop_front();
        if (restarts_.size() > opts_.max_restarts) return false;
        g_restarts.fetch_add(1, std::memory_order_relaxed);
        return true;
    }

    void on_down(const down& d) {
        auto found = running_by_monitor_.find(d.monitor_id);
        if (found == running_by_monitor_.end()) return;
        const auto it = found->second;
        running_by_monitor_.erase(found);
        it->running = false;
        const bool abnormal = d.reason == down_reason::panic || d.reason == down_reason::stopped;
        const auto policy = it->spec.restart;
        const bool listed = policy != restart_policy::temporary;
        if (listed) it->last_exit = exit_text(d);
        if (policy == restart_policy::temporary ||
            (policy == restart_policy::transient && !abnormal)) {
            children.erase(it);
            publish(listed);
            return;
        }
        if (!note_restart()) {
            g_give_ups.fetch_add(1, std::memory_order_relaxed);
            stop_all_reverse();
            throw supervisor_gave_up(
                "smarm supervisor: child \"" + it->spec.id + "\" ended " +
                std::to_string(restarts_.size()) + " times within the " +
                "restart period (max_restarts = " + std::to_string(opts_.max_restarts) + ")");
        }
        ++it->restarts;
        {
            std::lock_guard g(pub_->mu);
            ++pub_->info.restarts;
        }
        publish(listed);
        switch (opts_.strategy) {
            case restart_strategy::one_for_one:
                start(it);
                break;
            case restart_strategy::one_for_all:
                stop_all_reverse();
                restart_from(children.begin());
                break;
            case restart_strategy::rest_for_one:
                stop_all_reverse(std::next(it));
                restart_from(it);
                break;
        }
        if (internal::trace_hooks::on()) [[unlikely]]
            internal::trace_hooks::record(
                internal::trace_hooks::kind::restart, 0, 0, trace::intern(it->spec.id),
                internal::trace_hooks::word(detail::current_pid_or_invalid()),
                internal::trace_hooks::word(it->id));
    }

    /// Starts the stopped children from `from` on, in order; temporary
    /// ones a sibling's failure stopped are removed, never restarted (as
    /// in OTP; their body was moved into the actor that ran it).
    void restart_from(child_list::iterator from) {
        while (from != children.end()) {
            if (from->spec.restart == restart_policy::temporary) {
                from = children.erase(from);
                continue;
            }
            start(from++);
        }
        publish(false);
    }

    std::size_t running() const { return running_by_monitor_.size(); }

    /// Publishes the counts and, when a listed (non-temporary) child
    /// changed, the list of them: a connection supervisor's thousands of
    /// temporary children cost a count each, never a walk.
    void publish(bool rows) {
        std::vector<introspect::supervisor_child_info> list;
        if (rows)
            for (auto& c : children) {
                if (c.spec.restart == restart_policy::temporary) continue;
                list.push_back(
                    {c.spec.id, c.running ? c.id : pid{}, c.running,
                     c.spec.restart == restart_policy::permanent ? "permanent" : "transient",
                     c.restarts, c.last_exit});
            }
        std::lock_guard g(pub_->mu);
        auto& in = pub_->info;
        in.active = running_by_monitor_.size();
        if (rows) in.children = std::move(list);
        // Listed children are few (never the temporary ones): count them here.
        std::size_t listed_running = 0;
        for (auto& r : in.children)
            listed_running += r.running ? 1 : 0;
        in.temporary = in.active - std::min<std::uint64_t>(in.active, listed_running);
    }

    receiver<down>& downs() { return downs_; }
    const supervisor_options& options() const { return opts_; }

  private:
    supervisor_options opts_;
    receiver<down> downs_;
    sender<down> downs_tx_;
    std::deque<std::chrono::steady_clock::time_point> restarts_;
    std::unordered_map<std::uint64_t, child_list::iterator> running_by_monitor_;
    std::shared_ptr<published> pub_ = std::make_shared<published>();
};

}  // namespace

void supervise(supervisor_options opts, std::vector<child_spec> specs,
               receiver<supervisor_msg> control, const std::function<void()>& started) {
    auto [dtx, drx] = channel<down>();
    supervisor_state st(opts, std::move(drx), std::move(dtx));
    try {
        for (auto& s : specs)
            (void)st.add(std::move(s));
        if (started) started();
        bool control_open = true;
        for (;;) {
            std::size_t arm = control_open ? select({st.downs(), control}) : 0;
            if (arm == 0) {
                auto d = control_open ? st.downs().try_recv()
                                      : recv_result<down>{recv_status::ok, st.downs().recv()};
                if (d.value) st.on_down(*d.value);
                continue;
            }
            auto m = control.try_recv();
            if (m.status == recv_status::closed) {
                control_open = false;
                continue;
            }
            if (!m) continue;
            if (auto* r = std::get_if<start_child_req>(&*m.value)) {
                if (st.options().max_children != 0 && st.running() >= st.options().max_children) {
                    (void)r->reply.send("smarm supervisor: max_children (" +
                                        std::to_string(st.options().max_children) +
                                        ") reached; child \"" + r->spec.id + "\" refused");
                    continue;
                }
                auto it = st.add(std::move(r->spec));
                (void)r->reply.send(it->id);
            } else if (auto* a = std::get_if<start_child_cast>(&*m.value)) {
                if (st.options().max_children == 0 || st.running() < st.options().max_children)
                    st.add(std::move(a->spec), supervisor_state::start_mode::cast);
            } else if (auto* c = std::get_if<count_req>(&*m.value)) {
                (void)c->reply.send(children_count{st.children.size(), st.running()});
            } else if (auto* w = std::get_if<which_req>(&*m.value)) {
                std::vector<std::pair<std::string, pid>> out;
                for (auto& ch : st.children)
                    if (ch.running) out.emplace_back(ch.spec.id, ch.id);
                (void)w->reply.send(std::move(out));
            }
        }
    } catch (const stopped&) {
        // Our own pending stop must not cut the shutdown short: without
        // no_preempt the first wait for a child's down would throw again.
        {
            no_preempt hold;
            st.stop_all_reverse();
        }
        throw;
    }
}

}  // namespace detail

supervisor_ref start_supervisor(supervisor_options opts, std::vector<child_spec> children) {
    auto [tx, rx] = channel<detail::supervisor_msg>();
    auto h = spawn([opts, children = std::move(children), rx = std::move(rx)]() mutable {
        detail::supervise(opts, std::move(children), std::move(rx));
    });
    supervisor_ref ref{h.id(), std::move(tx)};
    h.detach();
    return ref;
}

child_spec supervisor_child(std::string id, supervisor_options opts,
                            std::vector<child_spec> children, restart_policy restart) {
    return {std::move(id),
            {},
            restart,
            [opts, children = std::move(children)](const std::function<void()>& started) {
                // Nobody holds the sender: control reads as closed, and the
                // loop then waits on its children's downs alone.
                auto [tx, rx] = channel<detail::supervisor_msg>();
                { auto drop = std::move(tx); }
                detail::supervise(opts, children, std::move(rx), started);
            }};
}

namespace {
template <class Reply, class Req>
Reply ask(const supervisor_ref& sup, Req req, receiver<Reply>& rx, std::chrono::nanoseconds timeout,
          const char* what) {
    if (!sup.control.send(detail::supervisor_msg(std::move(req))).ok())
        throw std::runtime_error(std::string(what) + ": the supervisor is not running");
    auto r = rx.recv_timeout(timeout);
    if (r.status == recv_status::timeout)
        throw std::runtime_error(std::string(what) + ": no answer from the supervisor in time");
    if (!r) throw std::runtime_error(std::string(what) + ": the supervisor ended");
    return std::move(*r.value);
}
}  // namespace

pid start_child(const supervisor_ref& sup, child_spec spec, std::chrono::nanoseconds timeout) {
    auto [tx, rx] = channel<std::variant<pid, std::string>>();
    auto r = ask(sup, detail::start_child_req{std::move(spec), std::move(tx)}, rx, timeout,
                 "smarm::start_child");
    if (auto* err = std::get_if<std::string>(&r)) throw std::runtime_error(*err);
    return std::get<pid>(r);
}

bool start_child_async(const supervisor_ref& sup, child_spec spec) {
    // Built in place: a connection's spec (a string and two functions) is
    // moved once per hop, and listeners cast thousands a second.
    return sup.control
        .send(detail::supervisor_msg(std::in_place_type<detail::start_child_cast>, std::move(spec)))
        .ok();
}

children_count count_children(const supervisor_ref& sup, std::chrono::nanoseconds timeout) {
    auto [tx, rx] = channel<children_count>();
    return ask(sup, detail::count_req{std::move(tx)}, rx, timeout, "smarm::count_children");
}

std::vector<std::pair<std::string, pid>> which_children(const supervisor_ref& sup,
                                                        std::chrono::nanoseconds timeout) {
    auto [tx, rx] = channel<std::vector<std::pair<std::string, pid>>>();
    return ask(sup, detail::which_req{std::move(tx)}, rx, timeout, "smarm::which_children");
}

}  // namespace smarm
