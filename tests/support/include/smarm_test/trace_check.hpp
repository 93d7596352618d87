#pragma once
// Reads a Chrome trace-event JSON (smarm::trace's export) and checks what
// Perfetto and chrome://tracing rely on. Header-only with Boost.JSON's
// implementation: include it in one translation unit per test binary.

#include <boost/json.hpp>
#include <boost/json/src.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace smarm_test {

struct trace_file {
    boost::json::object root;
    std::vector<boost::json::object> events;
    std::string error;  ///< a parse or shape error ("" = none)

    explicit trace_file(const std::string& text) {
        boost::system::error_code ec;
        boost::json::value v = boost::json::parse(text, ec);
        if (ec) {
            error = "not JSON: " + ec.message();
            return;
        }
        if (!v.is_object() || !v.as_object().contains("traceEvents") ||
            !v.as_object().at("traceEvents").is_array()) {
            error = "no traceEvents array";
            return;
        }
        root = v.as_object();
        for (const auto& e : root.at("traceEvents").as_array()) {
            if (!e.is_object()) {
                error = "an event is not an object";
                return;
            }
            events.push_back(e.as_object());
        }
    }

    static std::string str(const boost::json::object& e, const char* k) {
        auto it = e.find(k);
        return it != e.end() && it->value().is_string() ? std::string(it->value().as_string())
                                                        : std::string();
    }
    static double num(const boost::json::object& e, const char* k) {
        auto it = e.find(k);
        if (it == e.end()) return -1;
        if (it->value().is_double()) return it->value().as_double();
        if (it->value().is_int64()) return static_cast<double>(it->value().as_int64());
        if (it->value().is_uint64()) return static_cast<double>(it->value().as_uint64());
        return -1;
    }
    static std::string arg(const boost::json::object& e, const char* k) {
        auto it = e.find("args");
        if (it == e.end() || !it->value().is_object()) return {};
        const auto& a = it->value().as_object();
        auto j = a.find(k);
        if (j == a.end()) return {};
        if (j->value().is_string()) return std::string(j->value().as_string());
        return boost::json::serialize(j->value());
    }

    std::vector<boost::json::object> phase(const std::string& ph) const {
        std::vector<boost::json::object> out;
        for (const auto& e : events)
            if (str(e, "ph") == ph) out.push_back(e);
        return out;
    }

    /// Every event has the fields its phase needs ("" when all do).
    std::string check_fields() const {
        for (const auto& e : events) {
            const std::string ph = str(e, "ph");
            auto text = [&e] { return boost::json::serialize(e); };  // for an error only
            auto need = [&](const char* k) { return e.contains(k); };
            if (ph.empty()) return "no ph: " + text();
            if (!need("pid")) return "no pid: " + text();
            if (ph == "M") {
                if (!need("name") || !need("args")) return "metadata without name/args: " + text();
                continue;
            }
            if (!need("ts") || num(e, "ts") < 0) return "no ts: " + text();
            if (!need("tid")) return "no tid: " + text();
            if (ph == "X") {
                if (!need("name") || num(e, "dur") < 0) return "X without name/dur: " + text();
            } else if (ph == "b" || ph == "e") {
                if (!need("id") || !need("cat")) return "async without id/cat: " + text();
                if (ph == "b" && !need("name")) return "async begin without name: " + text();
            } else if (ph == "s" || ph == "f") {
                if (!need("id") || !need("name") || !need("cat"))
                    return "flow without id: " + text();
                if (ph == "f" && str(e, "bp") != "e")
                    return "flow end not bound to its slice: " + text();
            } else if (ph == "C") {
                if (!need("name") || !need("args")) return "counter without args: " + text();
            } else if (ph == "i") {
                if (!need("name") || !need("s")) return "instant without scope: " + text();
            } else {
                return "unexpected phase: " + text();
            }
        }
        return {};
    }

    /// X slices nest strictly per thread (here: never overlap partially).
    std::string check_nesting() const {
        std::map<std::int64_t, std::vector<std::pair<double, double>>> by_tid;
        for (const auto& e : phase("X"))
            by_tid[e.at("tid").to_number<std::int64_t>()].push_back(
                {num(e, "ts"), num(e, "ts") + num(e, "dur")});
        for (auto& [tid, v] : by_tid) {
            std::sort(v.begin(), v.end());
            std::vector<double> open;  // ends of enclosing slices
            for (const auto& [b, e] : v) {
                while (!open.empty() && open.back() <= b + 1e-9)
                    open.pop_back();
                if (!open.empty() && e > open.back() + 1e-6)
                    return "slices overlap on tid " + std::to_string(tid) + " at " +
                           std::to_string(b);
                open.push_back(e);
            }
        }
        return {};
    }

    static std::string id_of(const boost::json::object& e) {
        return boost::json::serialize(e.at("id"));
    }

    /// Every flow start has its end and the other way round.
    std::string check_flows() const {
        std::map<std::string, int> starts, ends;
        for (const auto& e : phase("s"))
            ++starts[id_of(e)];
        for (const auto& e : phase("f"))
            ++ends[id_of(e)];
        for (const auto& [id, n] : starts)
            if (n != 1 || ends[id] != 1) return "flow " + id + " has no single end";
        for (const auto& [id, n] : ends)
            if (n != 1 || starts[id] != 1) return "flow " + id + " has no single start";
        return {};
    }

    /// Async begins and ends balance per (cat, id), in file order.
    std::string check_async() const {
        std::map<std::string, int> depth;
        for (const auto& e : events) {
            const std::string ph = str(e, "ph");
            if (ph != "b" && ph != "e") continue;
            int& d = depth[str(e, "cat") + "/" + id_of(e)];
            d += ph == "b" ? 1 : -1;
            if (d < 0) return "async end before its begin: " + boost::json::serialize(e);
        }
        for (const auto& [k, d] : depth)
            if (d != 0) return "async track " + k + " left open";
        return {};
    }

    /// (from, to) of every flow: the pids in its start's and end's args.
    std::vector<std::pair<std::string, std::string>> flows() const {
        std::map<std::string, std::string> from;
        for (const auto& e : phase("s"))
            from[id_of(e)] = arg(e, "from");
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& e : phase("f"))
            out.emplace_back(from[id_of(e)], arg(e, "to"));
        return out;
    }

    /// How many flows go from actor `from` to actor `to` (pid texts).
    int flows_between(const std::string& from, const std::string& to) const {
        int n = 0;
        for (const auto& [f, t] : flows())
            n += f == from && t == to;
        return n;
    }

    /// The async "wait: ..." begins of actor `pid` (their reasons).
    std::vector<std::string> waits_of(const std::string& pid) const {
        std::vector<std::string> out;
        for (const auto& e : phase("b"))
            if (str(e, "name").rfind("wait: ", 0) == 0 && id_matches(e, pid))
                out.push_back(arg(e, "reason"));
        return out;
    }

    /// Every async event's id is its actor's pid word; this maps a pid
    /// text to that id through the lifetime begin's args.
    bool id_matches(const boost::json::object& e, const std::string& pid) const {
        for (const auto& b : phase("b"))
            if (arg(b, "pid") == pid) return id_of(b) == id_of(e);
        return false;
    }

    std::int64_t other(const char* k) const {
        auto it = root.find("otherData");
        if (it == root.end() || !it->value().is_object()) return -1;
        auto j = it->value().as_object().find(k);
        if (j == it->value().as_object().end() || !j->value().is_number()) return -1;
        return j->value().to_number<std::int64_t>();
    }

    /// All structural checks at once ("" when every one passes).
    std::string check_all() const {
        if (!error.empty()) return error;
        using check = std::string (trace_file::*)() const;
        for (check f : {&trace_file::check_fields, &trace_file::check_nesting,
                        &trace_file::check_flows, &trace_file::check_async}) {
            std::string e = (this->*f)();
            if (!e.empty()) return e;
        }
        return {};
    }
};

}  // namespace smarm_test
