#include "debug.hpp"

#include "json.hpp"

#include <charconv>
#include <cstdio>
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

}  // namespace

namespace {

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
    out += ",\"names\":[";
    for (std::size_t i = 0; i < a.names.size(); ++i) {
        if (i) out += ',';
        append_json_string(out, a.names[i]);
    }
    out += "],\"mailbox_depth\":";
    out += a.mailbox_depth ? std::to_string(*a.mailbox_depth) : "null";
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

void add_debug_routes(http::router& r) {
    r.get("/debug/actors", [](http::request&) {
        return http::response(http::status::ok, actors_json(introspect::take_snapshot()),
                              "application/json");
    });
    r.get("/debug/schedulers", [](http::request&) {
        std::string out;
        append_stats(out, introspect::stats());
        out += '\n';
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
    r.get("/debug/tree", [](http::request&) {
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
