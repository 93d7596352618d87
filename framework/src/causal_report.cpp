// The causal profiler's reports (include/smarm/causal.hpp): the text
// summary with its audit ledger, Coz's profile.coz lines, JSON and a
// gnuplot script. Pure functions of a profile.

#include <smarm/causal.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <stdexcept>

#include "json_text.hpp"

namespace smarm::causal {

using internal::json_string;

// ---- reports ----

namespace {

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}
double ms(std::uint64_t t) {
    return ticks_to_ns(t) / 1e6;
}

std::vector<std::string> site_order(const std::vector<profile::cell>& cells) {
    std::vector<std::string> out;
    for (const auto& c : cells)
        if (std::find(out.begin(), out.end(), c.site) == out.end()) out.push_back(c.site);
    return out;
}

/// Coz's fields are tab-separated key=value pairs: a name must hold neither.
std::string coz_name(std::string s) {
    for (char& ch : s)
        if (ch == '\t' || ch == '\n' || ch == '\r' || ch == '=') ch = '_';
    return s;
}

}  // namespace

std::optional<double> ranked_site::top() const {
    for (auto it = impacts.rbegin(); it != impacts.rend(); ++it)
        if (it->second) return it->second;
    return std::nullopt;
}

std::vector<ranked_site> rank(const profile& pr, const std::string& point) {
    const auto cells = pr.cells();
    std::vector<ranked_site> out;
    for (const std::string& site : site_order(cells)) {
        ranked_site r{site, {}};
        for (const auto& c : cells)
            if (c.site == site && c.speedup != 0)
                r.impacts.emplace_back(c.speedup, pr.impact(site, c.speedup, point));
        std::sort(r.impacts.begin(), r.impacts.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
        out.push_back(std::move(r));
    }
    std::stable_sort(out.begin(), out.end(), [](const ranked_site& a, const ranked_site& b) {
        const auto x = a.top(), y = b.top();
        return x && (!y || *x > *y);
    });
    return out;
}

std::string render_ranking(const profile& pr, const std::string& point) {
    std::ostringstream o;
    const auto ranked = rank(pr, point);
    std::set<unsigned> speedups;
    bool latency = false;
    for (const auto& c : pr.cells())
        latency = latency || c.latency.count(point) != 0;
    for (const auto& r : ranked)
        for (const auto& [pct, im] : r.impacts)
            speedups.insert(pct);
    o << "== sites ranked by " << point
      << (latency ? " (mean latency shorter by" : " (throughput higher by")
      << ", when the site is made faster by) ==\n      ";
    for (unsigned pct : speedups)
        o << fmt("  %7.0f%%", pct);
    o << "  site\n";
    unsigned place = 0;
    for (const auto& r : ranked) {
        o << fmt("  %3.0f.", ++place);
        for (unsigned pct : speedups) {
            auto it = std::find_if(r.impacts.begin(), r.impacts.end(),
                                   [pct](const auto& e) { return e.first == pct; });
            o << (it != r.impacts.end() && it->second ? fmt("  %+7.1f%%", *it->second)
                                                      : std::string("       n/a"));
        }
        o << "  " << r.site << "\n";
    }
    return o.str();
}

std::string render_summary(const profile& pr, const std::string& rank_by) {
    std::ostringstream o;
    const auto cells = pr.cells();
    if (!rank_by.empty()) o << render_ranking(pr, rank_by);
    std::size_t thin = 0;
    std::chrono::nanoseconds total{0};
    for (const window& w : pr.windows) {
        thin += w.thin ? 1 : 0;
        total += w.wall;
    }
    o << "== smarm causal profile: " << pr.windows.size() << " windows (" << thin
      << " thin, not counted), " << fmt("%.1f", static_cast<double>(total.count()) / 1e9)
      << " s ==\n";
    for (const std::string& site : site_order(cells)) {
        o << "site " << site << "\n";
        std::set<std::string> tp, lp;
        for (const auto& c : cells)
            if (c.site == site) {
                for (const auto& [n, v] : c.throughput)
                    if (v != 0) tp.insert(n);
                for (const auto& [n, l] : c.latency)
                    if (l.arrivals != 0) lp.insert(n);
            }
        for (const std::string& pt : tp) {
            o << "  throughput " << pt << "\n    speedup  windows        rate/s    impact\n";
            for (const auto& c : cells) {
                if (c.site != site) continue;
                const auto r = c.rate(pt);
                const auto im = pr.impact(site, c.speedup, pt);
                o << fmt("    %6.0f%%", c.speedup) << fmt("  %7.0f", c.windows)
                  << fmt("  %12.1f", r.value_or(0))
                  << (im ? fmt("  %+7.1f%%", *im) : std::string("      n/a")) << "\n";
            }
        }
        for (const std::string& pt : lp) {
            o << "  latency " << pt << "\n    speedup  windows    mean ms    impact\n";
            for (const auto& c : cells) {
                if (c.site != site) continue;
                auto it = c.latency.find(pt);
                const double mean = it == c.latency.end() ? 0 : it->second.mean_ns / 1e6;
                const auto im = pr.impact(site, c.speedup, pt);
                o << fmt("    %6.0f%%", c.speedup) << fmt("  %7.0f", c.windows)
                  << fmt("  %9.3f", mean)
                  << (im ? fmt("  %+7.1f%%", *im) : std::string("      n/a")) << "\n";
            }
        }
    }
    o << "== where the delay went (ms; n = count) ==\n"
         "site                 speedup  injected  absorbed  forgiven  tail-park/n    "
         "tail-yield/n   off-cpu/n    outside/n      discarded/n  unarmed\n";
    for (const window& w : pr.windows) {
        const ledger& a = w.audit;
        char b[256];
        std::snprintf(b, sizeof b,
                      "%-20s %6u%%%s %9.1f %9.1f %9.1f %8.2f/%-6llu %8.2f/%-6llu %8.2f/%-6llu "
                      "%8.2f/%-6llu %7.2f/%-4llu %llu\n",
                      w.site.c_str(), w.speedup, w.thin ? "*" : " ", ms(a.injected), ms(a.absorbed),
                      ms(a.forgiven), ms(a.tail_park),
                      static_cast<unsigned long long>(a.tail_park_n), ms(a.tail_yield),
                      static_cast<unsigned long long>(a.tail_yield_n), ms(a.offcpu),
                      static_cast<unsigned long long>(a.offcpu_n), ms(a.outside),
                      static_cast<unsigned long long>(a.outside_n), ms(a.discarded),
                      static_cast<unsigned long long>(a.discarded_n),
                      static_cast<unsigned long long>(a.unarmed_n));
        o << b;
    }
    if (thin != 0) o << "(* thin window: a point saw too few visits; not counted)\n";
    o << "note: a site's time counts while its actors run on a CPU or wait, inside it, on the\n"
         "world outside (IO, the blocking pool: outside/n); run-queue waits are not shrunk by\n"
         "faster code, so impacts are lower bounds (rankings hold).\n"
         "off-cpu is that run-queue wait after a yield inside the site, at the speedup's "
         "share (measured, not injected).\n";
    return o.str();
}

std::string render_coz(const profile& pr) {
    std::ostringstream o;
    o << "startup\ttime=" << pr.startup_ns << "\n";
    std::chrono::nanoseconds total{0};
    for (const window& w : pr.windows) {
        total += w.wall;
        if (w.thin) continue;
        o << "experiment\tselected=" << coz_name(w.site)
          << "\tspeedup=" << fmt("%.2f", w.speedup / 100.0)
          << "\tduration=" << w.virtual_time().count() << "\tselected-samples=" << w.samples
          << "\n";
        for (const auto& [n, v] : w.throughput)
            o << "throughput-point\tname=" << coz_name(n) << "\tdelta=" << v << "\n";
        for (const auto& [n, l] : w.latency) {
            // Coz's viewer reads latency as difference / arrival rate: the
            // mean number in flight (Little's law) is what it should divide.
            const double v = static_cast<double>(w.virtual_time().count());
            const double mean_in_flight =
                v > 0 ? l.mean_ns * static_cast<double>(l.arrivals) / v : 0.0;
            o << "latency-point\tname=" << coz_name(n) << "\tarrivals=" << l.arrivals
              << "\tdepartures=" << l.departures
              << "\tdifference=" << static_cast<long long>(std::llround(mean_in_flight)) << "\n";
        }
    }
    o << "runtime\ttime=" << total.count() << "\n";
    return o.str();
}

std::string render_json(const profile& pr) {
    std::ostringstream o;
    auto num = [](double v) { return std::isfinite(v) ? fmt("%.6g", v) : std::string("null"); };
    o << "{\"startup_ns\":" << pr.startup_ns << ",\"windows\":[";
    bool first = true;
    for (const window& w : pr.windows) {
        o << (first ? "" : ",") << "{\"site\":" << json_string(w.site)
          << ",\"speedup\":" << w.speedup << ",\"wall_ns\":" << w.wall.count()
          << ",\"injected_ns\":" << w.injected.count() << ",\"samples\":" << w.samples
          << ",\"thin\":" << (w.thin ? "true" : "false") << ",\"throughput\":{";
        first = false;
        bool f2 = true;
        for (const auto& [n, v] : w.throughput) {
            o << (f2 ? "" : ",") << json_string(n) << ":" << v;
            f2 = false;
        }
        o << "},\"latency\":{";
        f2 = true;
        for (const auto& [n, l] : w.latency) {
            o << (f2 ? "" : ",") << json_string(n) << ":{\"arrivals\":" << l.arrivals
              << ",\"departures\":" << l.departures << ",\"in_flight\":" << l.in_flight
              << ",\"mean_ns\":" << num(l.mean_ns) << "}";
            f2 = false;
        }
        const ledger& a = w.audit;
        o << "},\"audit_ns\":{\"injected\":" << num(ticks_to_ns(a.injected))
          << ",\"absorbed\":" << num(ticks_to_ns(a.absorbed))
          << ",\"forgiven\":" << num(ticks_to_ns(a.forgiven))
          << ",\"tail_park\":" << num(ticks_to_ns(a.tail_park))
          << ",\"tail_park_n\":" << a.tail_park_n
          << ",\"tail_yield\":" << num(ticks_to_ns(a.tail_yield))
          << ",\"tail_yield_n\":" << a.tail_yield_n << ",\"offcpu\":" << num(ticks_to_ns(a.offcpu))
          << ",\"offcpu_n\":" << a.offcpu_n << ",\"outside\":" << num(ticks_to_ns(a.outside))
          << ",\"outside_n\":" << a.outside_n << ",\"discarded\":" << num(ticks_to_ns(a.discarded))
          << ",\"discarded_n\":" << a.discarded_n << ",\"unarmed_n\":" << a.unarmed_n << "}}";
    }
    o << "],\"cells\":[";
    first = true;
    const auto cells = pr.cells();
    for (const auto& c : cells) {
        o << (first ? "" : ",") << "{\"site\":" << json_string(c.site)
          << ",\"speedup\":" << c.speedup << ",\"windows\":" << c.windows
          << ",\"wall_ns\":" << c.wall.count() << ",\"injected_ns\":" << c.injected.count()
          << ",\"points\":{";
        first = false;
        bool f2 = true;
        for (const auto& [n, v] : c.throughput) {
            const auto im = pr.impact(c.site, c.speedup, n);
            o << (f2 ? "" : ",") << json_string(n) << ":{\"kind\":\"throughput\",\"visits\":" << v
              << ",\"rate\":" << num(c.rate(n).value_or(0))
              << ",\"impact_pct\":" << (im ? num(*im) : std::string("null")) << "}";
            f2 = false;
        }
        for (const auto& [n, l] : c.latency) {
            const auto im = pr.impact(c.site, c.speedup, n);
            o << (f2 ? "" : ",") << json_string(n)
              << ":{\"kind\":\"latency\",\"arrivals\":" << l.arrivals
              << ",\"mean_ns\":" << num(l.mean_ns)
              << ",\"impact_pct\":" << (im ? num(*im) : std::string("null")) << "}";
            f2 = false;
        }
        o << "}}";
    }
    o << "]}\n";
    return o.str();
}

std::string render_gnuplot(const profile& pr, const std::string& output, const std::string& point) {
    auto ends = [&](const char* suf) {
        const std::size_t n = std::char_traits<char>::length(suf);
        return output.size() > n && output.compare(output.size() - n, n, suf) == 0;
    };
    const bool png = ends(".png");
    if (!png && !ends(".svg"))
        throw std::invalid_argument("smarm::causal::render_gnuplot: \"" + output +
                                    "\" is not a .png or .svg name");
    const auto cells = pr.cells();
    std::string pt = point;
    if (pt.empty())
        for (const auto& c : cells)
            for (const auto& [n, v] : c.throughput)
                if (pt.empty() && v != 0) pt = n;
    auto quote = [](std::string s) {
        std::string o;
        for (char ch : s)
            o += ch == '\'' ? std::string("''") : std::string(1, ch);
        return "'" + o + "'";
    };
    std::ostringstream o;
    o << (png ? "set terminal pngcairo size 900,500\n" : "set terminal svg size 900,500\n")
      << "set output " << quote(output) << "\n"
      << "set title " << quote("causal profile: " + pt) << " noenhanced\n"
      << "set xlabel 'site speedup (%)'\nset ylabel 'program speedup (%)'\n"
      << "set grid\nset key left top noenhanced\nset xrange [0:*]\n";
    const auto sites = site_order(cells);
    for (std::size_t i = 0; i < sites.size(); ++i) {
        o << "$s" << i << " << EOD\n";
        for (const auto& c : cells)
            if (c.site == sites[i])
                if (auto im = pr.impact(c.site, c.speedup, pt))
                    o << c.speedup << " " << *im << "\n";
        o << "EOD\n";
    }
    o << "plot ";
    for (std::size_t i = 0; i < sites.size(); ++i)
        o << (i ? ", " : "") << "$s" << i << " using 1:2 with linespoints lw 2 title "
          << quote(sites[i]);
    if (sites.empty()) o << "0 title 'no counted window'";
    o << "\n";
    return o.str();
}

}  // namespace smarm::causal
