#pragma once
// profile.coz checked line by line against the grammar Coz's viewer reads
// (plasma-umass/coz viewer/ts/profile.ts, parseLine and the loader): a
// record type, then tab-separated key=value fields; integer fields are
// base-10 digits, speedup a fraction in [0, 1]; each type has its required
// fields; point records follow an experiment (the viewer drops them
// otherwise). Returns the problems, one per bad line ("" when all is well).

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace smarm_test {

inline std::string coz_grammar_errors(const std::string& text) {
    static const std::map<std::string, std::set<std::string>> required = {
        {"startup", {"time"}},
        {"runtime", {"time"}},
        {"shutdown", {"time"}},
        {"samples", {}},
        {"experiment", {"selected", "speedup", "duration"}},
        {"throughput-point", {"name", "delta"}},
        {"progress-point", {"name", "delta"}},
        {"latency-point", {"name", "arrivals", "departures", "difference"}},
    };
    static const std::set<std::string> integers = {
        "time", "duration", "delta", "arrivals", "departures", "difference", "selected-samples"};
    std::ostringstream err;
    std::istringstream in(text);
    std::string line;
    int n = 0;
    bool in_experiment = false, started = false;
    while (std::getline(in, line)) {
        ++n;
        auto bad = [&](const std::string& why) {
            err << "line " << n << ": " << why << ": " << line << "\n";
        };
        if (line.empty()) continue;
        if (line.find('\r') != std::string::npos) bad("carriage return");
        std::vector<std::string> parts;
        for (std::size_t at = 0;;) {
            const auto tab = line.find('\t', at);
            parts.push_back(line.substr(at, tab == std::string::npos ? tab : tab - at));
            if (tab == std::string::npos) break;
            at = tab + 1;
        }
        const auto kind = required.find(parts[0]);
        if (kind == required.end()) {
            bad("unknown record type \"" + parts[0] + "\"");
            continue;
        }
        if (n == 1 && parts[0] != "startup") bad("the first record is not startup");
        started = started || parts[0] == "startup";
        std::map<std::string, std::string> fields;
        for (std::size_t i = 1; i < parts.size(); ++i) {
            const auto eq = parts[i].find('=');
            if (eq == std::string::npos || eq == 0) {
                bad("field \"" + parts[i] + "\" is not key=value");
                continue;
            }
            const std::string key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
            if (!fields.emplace(key, value).second) bad("field " + key + " twice");
            if (integers.count(key) &&
                (value.empty() || value.find_first_not_of("0123456789") != std::string::npos))
                bad(key + "=" + value + " is not a non-negative integer");
            if (key == "speedup") {
                char* end = nullptr;
                const double v = std::strtod(value.c_str(), &end);
                if (value.empty() || *end != '\0' || v < 0 || v > 1)
                    bad("speedup=" + value + " is not a fraction in [0, 1]");
            }
            if (key == "name" || key == "selected")
                if (value.empty()) bad(key + " is empty");
        }
        for (const std::string& k : kind->second)
            if (!fields.count(k)) bad("no " + k + " field");
        if (parts[0] == "experiment") in_experiment = true;
        if (parts[0].find("-point") != std::string::npos && !in_experiment)
            bad("a point before any experiment");
    }
    if (!started) err << "no startup record\n";
    return err.str();
}

}  // namespace smarm_test
