#include "debug.hpp"

#include "json.hpp"

#include <smarm/metrics/metrics.hpp>
#include <smarm/supervisor.hpp>

#include <charconv>
#include <cstdio>
#include <map>
#include <optional>
#include <string_view>

namespace smarm::services {

namespace {

void field(std::string& out, const char* name, std::uint64_t v, bool comma = true) {
    if (comma) out += ',';
    out += '"';
    out += name;
    out += "\":";
    out += std::to_string(v);
}

/// The runtime's counters as a JSON object; each scheduler's utilisation
/// since the run began (busy + spinning + parked = running).
void append_stats(std::string& out, const runtime_stats& st) {
    out += '{';
    field(out, "spawns", st.spawns, false);
    field(out, "live_actors", st.live_actors);
    field(out, "timers_pending", st.timers_pending);
    field(out, "run_queue_len", st.run_queue_len);
    field(out, "max_actors", st.max_actors);
    field(out, "uptime_ns", st.uptime_ns);
    field(out, "awake_cap", st.awake_cap);
    out += st.idle_spin ? ",\"idle_spin\":true" : ",\"idle_spin\":false";
    out += ",\"schedulers\":[";
    for (std::size_t i = 0; i < st.schedulers.size(); ++i) {
        auto& k = st.schedulers[i];
        if (i) out += ',';
        out += '{';
        field(out, "id", i, false);
        field(out, "pops", k.pops);
        field(out, "parks", k.parks);
        field(out, "wakes", k.wakes);
        field(out, "yields", k.yields);
        field(out, "overruns", k.overruns);
        field(out, "timer_fires", k.timer_fires);
        field(out, "running_ns", k.running_ns);
        field(out, "busy_ns", k.busy_ns);
        field(out, "spinning_ns", k.spinning_ns);
        field(out, "parked_ns", k.parked_ns);
        out += '}';
    }
    out += "]}";
}

/// The process around the runtime: memory, CPU, descriptors, restarts and
/// (when known) connections.
void append_process(std::string& out, const debug_sources& src) {
    const auto p = metrics::read_process();
    const auto sup = supervisor_totals();
    out += '{';
    field(out, "rss_bytes", static_cast<std::uint64_t>(p.rss_bytes), false);
    out += ",\"cpu_seconds\":" + std::to_string(p.cpu_seconds);
    field(out, "open_fds", static_cast<std::uint64_t>(p.open_fds));
    field(out, "restarts", sup.restarts);
    field(out, "give_ups", sup.give_ups);
    if (src.connections)
        if (auto c = src.connections()) {
            field(out, "connections_active", c->active);
            field(out, "connections_accepted", c->accepted);
        }
    out += '}';
}

}  // namespace

namespace {

/// A JSON array of strings.
void append_strings(std::string& out, const std::vector<std::string>& xs) {
    out += '[';
    for (std::size_t i = 0; i < xs.size(); ++i) {
        if (i) out += ',';
        append_json_string(out, xs[i]);
    }
    out += ']';
}

/// One actor as a JSON object (the fields of /debug/actors' entries).
void append_actor(std::string& out, const introspect::actor_info& a) {
    out += "{\"pid\":";
    append_json_string(out, a.id.to_string());
    out += ",\"parent\":";
    if (a.parent.valid())
        append_json_string(out, a.parent.to_string());
    else
        out += "null";
    out += ",\"state\":";
    append_json_string(out, a.state);
    out += ",\"names\":";
    append_strings(out, a.names);
    out += ",\"groups\":";
    append_strings(out, a.groups);
    out += ",\"mailbox_depth\":";
    out += a.mailbox_depth ? std::to_string(*a.mailbox_depth) : "null";
    out += ",\"mailbox_age_ns\":";
    out += a.mailbox_age_ns ? std::to_string(*a.mailbox_age_ns) : "null";
    field(out, "monitors", a.monitors);
    field(out, "links", a.links);
    field(out, "joiners", a.joiners);
    field(out, "overruns", a.overruns);
    field(out, "messages_received", a.messages_received);
    out += ",\"trap_exit\":";
    out += a.trap_exit ? "true" : "false";
    out += ",\"stop_requested\":";
    out += a.stop_requested ? "true" : "false";
    out += ",\"wait\":";
    append_json_string(out, a.wait);
    field(out, "wait_epoch", a.wait_epoch);
    field(out, "cpu_ns", a.cpu_ns);
    out += '}';
}

void append_child(std::string& out, const introspect::supervisor_child_info& c) {
    out += "{\"id\":";
    append_json_string(out, c.id);
    out += ",\"pid\":";
    if (c.actor.valid())
        append_json_string(out, c.actor.to_string());
    else
        out += "null";
    out += ",\"running\":";
    out += c.running ? "true" : "false";
    out += ",\"restart\":";
    append_json_string(out, c.restart);
    field(out, "restarts", c.restarts);
    out += ",\"last_exit\":";
    append_json_string(out, c.last_exit);
    out += '}';
}

void append_supervisor(std::string& out, const introspect::supervisor_info& s) {
    out += "{\"pid\":";
    append_json_string(out, s.id.to_string());
    out += ",\"strategy\":";
    append_json_string(out, s.strategy);
    field(out, "max_restarts", s.max_restarts);
    field(out, "period_ns", s.period_ns);
    field(out, "restarts", s.restarts);
    field(out, "active", s.active);
    field(out, "temporary", s.temporary);
    out += ",\"children\":[";
    for (std::size_t i = 0; i < s.children.size(); ++i) {
        if (i) out += ',';
        append_child(out, s.children[i]);
    }
    out += "]}";
}

/// The forest as JSON: {"version", "roots": [node...]}, a node being
/// {"actor", "orphan", "supervisor" (or null), "child" (or null),
/// "children"}. Written with an explicit stack: a deep chain of spawns must
/// not recurse.
std::string tree_json(const std::vector<introspect::tree_node>& forest,
                      const std::vector<introspect::supervisor_info>& sups) {
    std::map<pid, const introspect::supervisor_info*> sup_of;
    std::map<pid, const introspect::supervisor_child_info*> child_of;
    for (auto& s : sups) {
        sup_of[s.id] = &s;
        for (auto& c : s.children)
            if (c.actor.valid()) child_of[c.actor] = &c;
    }
    std::string out = "{\"version\":" + std::to_string(introspect::format_version) + ",\"roots\":[";
    const auto open = [&](const introspect::tree_node& n) {
        out += "{\"actor\":";
        append_actor(out, n.actor);
        out += ",\"orphan\":";
        out += n.orphan ? "true" : "false";
        out += ",\"supervisor\":";
        if (auto it = sup_of.find(n.actor.id); it != sup_of.end())
            append_supervisor(out, *it->second);
        else
            out += "null";
        out += ",\"child\":";
        if (auto it = child_of.find(n.actor.id); it != child_of.end())
            append_child(out, *it->second);
        else
            out += "null";
        out += ",\"children\":[";
    };
    struct item {
        const introspect::tree_node* n;
        std::size_t next;
    };
    for (std::size_t r = 0; r < forest.size(); ++r) {
        if (r) out += ',';
        open(forest[r]);
        std::vector<item> stack{{&forest[r], 0}};
        while (!stack.empty()) {
            item& top = stack.back();
            if (top.next < top.n->children.size()) {
                if (top.next) out += ',';
                const auto* c = &top.n->children[top.next++];
                open(*c);
                stack.push_back({c, 0});  // `top` is not used after this
            } else {
                out += "]}";
                stack.pop_back();
            }
        }
    }
    out += "]}\n";
    return out;
}

/// "<0.12.3>" or "12.3" (index.generation); nullopt for anything else.
std::optional<pid> parse_pid(std::string_view t) {
    if (t.starts_with("<0.") && t.ends_with(">")) t = t.substr(3, t.size() - 4);
    const auto dot = t.find('.');
    if (dot == std::string_view::npos) return std::nullopt;
    std::uint32_t idx = 0, gen = 0;
    const auto a = std::from_chars(t.data(), t.data() + dot, idx);
    const auto b = std::from_chars(t.data() + dot + 1, t.data() + t.size(), gen);
    if (a.ec != std::errc{} || a.ptr != t.data() + dot || b.ec != std::errc{} ||
        b.ptr != t.data() + t.size() || dot == 0 || idx == pid::invalid_index)
        return std::nullopt;
    return pid{idx, gen};
}

/// The route's {pid}, or `bad` set to the 400 naming it.
std::optional<pid> pid_param(const http::request& q, std::optional<http::response>& bad) {
    const std::string text(q.param("pid").value_or(""));  // the path is decoded
    auto p = parse_pid(text);
    if (!p)
        bad.emplace(http::status::bad_request,
                    "pid " + text + ": want <0.INDEX.GENERATION> or INDEX.GENERATION\n");
    return p;
}

}  // namespace

std::string actors_json(const introspect::snapshot& s) {
    std::string out = "{\"version\":" + std::to_string(s.version) + ",\"actors\":[";
    bool first = true;
    for (auto& a : s.actors) {
        if (!first) out += ',';
        first = false;
        append_actor(out, a);
    }
    out += "],\"stats\":";
    append_stats(out, s.stats);
    out += "}\n";
    return out;
}

std::string format_of(const http::request& q, std::string fallback) {
    if (auto f = q.form_param("format")) return *f;
    const std::string_view accept = q.header("Accept").value_or("");
    const auto json = accept.find("application/json");
    const auto text = accept.find("text/");
    if (json != std::string_view::npos && (text == std::string_view::npos || json < text))
        return "json";
    return fallback;
}

void add_debug_routes(http::router& r, debug_sources src) {
    r.get("/debug/actors", [](http::request&) {
        return http::response(http::status::ok, actors_json(introspect::take_snapshot()),
                              "application/json");
    });
    r.get("/debug/schedulers", [src](http::request&) {
        // The counters' object, with the process's beside them.
        std::string out;
        append_stats(out, introspect::stats());
        out.pop_back();
        out += ",\"process\":";
        append_process(out, src);
        out += "}\n";
        return http::response(http::status::ok, std::move(out), "application/json");
    });
    r.get("/debug/actor/{pid}", [](http::request& q) {
        std::optional<http::response> bad;
        const auto p = pid_param(q, bad);
        if (!p) return std::move(*bad);
        const auto a = introspect::info(*p);
        if (!a)
            return http::response(http::status::not_found,
                                  "no live actor " + p->to_string() + "\n");
        std::string out;
        append_actor(out, *a);
        out += '\n';
        return http::response(http::status::ok, std::move(out), "application/json");
    });
    r.get("/debug/supervisors", [](http::request&) {
        std::string out = "[";
        const auto sups = introspect::supervisors();
        for (std::size_t i = 0; i < sups.size(); ++i) {
            if (i) out += ',';
            append_supervisor(out, sups[i]);
        }
        out += "]\n";
        return http::response(http::status::ok, std::move(out), "application/json");
    });
    r.get("/debug/tree", [](http::request& q) {
        const std::string f = format_of(q, "text");
        if (f == "json")
            return http::response(http::status::ok,
                                  tree_json(introspect::tree(), introspect::supervisors()),
                                  "application/json");
        if (f != "text")
            return http::response(http::status::bad_request,
                                  "format=" + f + ": want text or json\n");
        return http::response(http::status::ok, introspect::render_tree(introspect::tree()));
    });
}

void add_debug_actions(http::router& r) {
    r.post("/debug/actor/{pid}/stop", [](http::request& q) {
        std::optional<http::response> bad;
        const auto p = pid_param(q, bad);
        if (!p) return std::move(*bad);
        if (!smarm::request_stop(*p))
            return http::response(http::status::not_found,
                                  "no live actor " + p->to_string() + "\n");
        return http::response(http::status::accepted,
                              "stop requested for " + p->to_string() + "\n");
    });
}

}  // namespace smarm::services
