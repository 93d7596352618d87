// The causal profiler's controller and reports (include/smarm/causal.hpp):
// run(plan) schedules experiment windows and reads the points around each;
// profile adds windows into cells; the renderers print them.
//
// The controller is one thread of control (an actor or an OS thread); a
// second concurrent run() is refused (g_active). It sleeps wall-anchored:
// a window's length is wall time by definition, and a sleep that chased the
// delay the window injects would stretch every window it measures.

#include <smarm/causal.hpp>
#include <smarm/progress.hpp>
#include <smarm/runtime.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "scheduler.hpp"

namespace smarm::causal {

namespace {

std::atomic<bool> g_active{false};

void controller_sleep(std::chrono::nanoseconds d) {
    if (in_actor())
        sleep_wall(d);
    else
        std::this_thread::sleep_for(d);
}

std::chrono::nanoseconds ticks_ns(std::uint64_t t) {
    return std::chrono::nanoseconds(static_cast<std::int64_t>(ticks_to_ns(t)));
}

void check_plan(const plan& p) {
    auto bad = [](const std::string& what) {
        throw std::invalid_argument("smarm::causal::run: plan." + what);
    };
    if (p.mode == plan::schedule::sweep) {
        if (p.speedups.empty()) bad("speedups is empty");
        if (p.rounds == 0) bad("rounds is 0");
        for (unsigned s : p.speedups)
            if (s > 100) bad("speedups holds " + std::to_string(s) + "% (over 100%)");
        if (std::find(p.speedups.begin(), p.speedups.end(), 0u) == p.speedups.end())
            bad("speedups has no 0% baseline (impacts are measured against it)");
    } else if (p.experiments == 0) {
        bad("experiments is 0");
    }
    if (p.window.count() <= 0) bad("window is not positive");
    if (p.max_window < p.window) bad("max_window is shorter than window");
    if (p.cooldown.count() < 0) bad("cooldown is negative");
}

/// The selected sites, by id, in registration order or the plan's order.
std::vector<std::pair<site_id, std::string>> selected_sites(const plan& p) {
    std::vector<std::pair<site_id, std::string>> out;
    if (p.sites.empty()) {
        for (site_id id = 1;; ++id) {
            std::string n = site_name(id);
            if (n.empty()) break;
            out.emplace_back(id, std::move(n));
        }
        if (out.empty())
            throw std::invalid_argument(
                "smarm::causal::run: no site is registered (start the workload first)");
        return out;
    }
    for (const std::string& n : p.sites) {
        site_id found = 0;
        for (site_id id = 1;; ++id) {
            const std::string have = site_name(id);
            if (have.empty()) break;
            if (have == n) found = id;
        }
        if (found == 0)
            throw std::invalid_argument("smarm::causal::run: plan.sites names \"" + n +
                                        "\", which is not a registered site");
        out.emplace_back(found, n);
    }
    return out;
}

struct point_reading {
    std::map<std::string, std::uint64_t> progress;
    std::map<std::string, latency_point::totals> latency;
    std::uint64_t tick = 0;
    static point_reading now() {
        return {progress_point::snapshot(), latency_point::snapshot(), detail::ticks()};
    }
};

/// The fewest visits any watched point saw in `w` (UINT64_MAX: none watched).
std::uint64_t fewest_visits(const window& w, const std::set<std::string>& watched) {
    std::uint64_t least = UINT64_MAX;
    for (const std::string& n : watched) {
        if (auto it = w.throughput.find(n); it != w.throughput.end())
            least = std::min(least, it->second);
        else if (auto jt = w.latency.find(n); jt != w.latency.end())
            least = std::min(least, jt->second.arrivals);
        else
            least = 0;
    }
    return least;
}

class controller {
  public:
    explicit controller(const plan& p) : p_(p), sites_(selected_sites(p)), len_(p.window) {
        start_ = point_reading::now();
    }

    /// One window on (site, pct); returns it (also appended to the profile).
    const window& experiment(const std::pair<site_id, std::string>& site, unsigned pct) {
        const point_reading before = point_reading::now();
        const ledger audit0 = totals();
        const auto w0 = std::chrono::steady_clock::now();
        begin(site.first, pct);
        controller_sleep(len_);
        end();
        // At once: injection and payment stop with end(), forgiveness does
        // not (a later read would count cooldown wakes into the window).
        const ledger audit = totals() - audit0;
        const auto w1 = std::chrono::steady_clock::now();
        const point_reading after = point_reading::now();

        window w;
        w.site = site.second;
        w.speedup = pct;
        w.wall = w1 - w0;
        w.injected = std::min(ticks_ns(audit.injected), w.wall);
        w.samples = audit.injected_n;
        w.audit = audit;
        for (const auto& [name, n] : after.progress) {
            auto it = before.progress.find(name);
            w.throughput[name] = n - (it == before.progress.end() ? 0 : it->second);
        }
        const double virt_over_wall =
            w.wall.count() > 0 ? static_cast<double>(w.virtual_time().count()) /
                                     static_cast<double>(w.wall.count())
                               : 1.0;
        for (const auto& [name, t] : after.latency) {
            auto it = before.latency.find(name);
            const latency_point::totals b =
                it == before.latency.end() ? latency_point::totals{} : it->second;
            const auto lw = latency_point::between(b, t, before.tick, after.tick);
            latency_sample ls;
            ls.arrivals = lw.arrivals;
            ls.departures = lw.departures;
            ls.in_flight = lw.in_flight_end;
            ls.mean_ns = ticks_to_ns(static_cast<std::uint64_t>(lw.mean_ticks())) * virt_over_wall;
            w.latency[name] = ls;
        }
        const std::uint64_t least = fewest_visits(w, watched(after));
        w.thin = least < p_.min_visits;
        if (w.thin) {
            len_ = std::min<std::chrono::milliseconds>(len_ * 2, p_.max_window);
        } else if (least > 2 * p_.min_visits && len_ >= 2 * p_.window) {
            len_ /= 2;  // Coz's rule: shrink back once points see plenty
        }
        out_.windows.push_back(std::move(w));
        controller_sleep(p_.cooldown);
        return out_.windows.back();
    }

    void sweep() {
        for (unsigned r = 0; r < p_.rounds; ++r)
            for (const auto& site : sites_)
                for (unsigned pct : p_.speedups) {
                    // A thin cell is run again at the doubled length; at the
                    // longest length it stays thin and the sweep goes on.
                    for (;;) {
                        const bool longest = len_ >= p_.max_window;
                        if (!experiment(site, pct).thin || longest) break;
                    }
                }
    }

    void randomized() {
        std::mt19937_64 rng(p_.seed != 0 ? p_.seed
                                         : static_cast<std::uint64_t>(
                                               std::chrono::steady_clock::now()
                                                   .time_since_epoch()
                                                   .count()));
        std::uniform_int_distribution<std::size_t> pick_site(0, sites_.size() - 1);
        std::uniform_int_distribution<unsigned> pick(0, p_.baseline_weight + 20);
        for (unsigned i = 0; i < p_.experiments; ++i) {
            const unsigned r = pick(rng);
            const unsigned pct = r <= p_.baseline_weight ? 0 : (r - p_.baseline_weight) * 5;
            experiment(sites_[pick_site(rng)], pct);
        }
    }

    profile take() { return std::move(out_); }
    profile& out() { return out_; }

  private:
    /// The points that decide thinness: the plan's, or those that moved
    /// since run() began.
    std::set<std::string> watched(const point_reading& now) const {
        std::set<std::string> w(p_.points.begin(), p_.points.end());
        if (!w.empty()) return w;
        for (const auto& [name, n] : now.progress) {
            auto it = start_.progress.find(name);
            if (n != (it == start_.progress.end() ? 0 : it->second)) w.insert(name);
        }
        for (const auto& [name, t] : now.latency) {
            auto it = start_.latency.find(name);
            if (t.arrivals != (it == start_.latency.end() ? 0 : it->second.arrivals))
                w.insert(name);
        }
        return w;
    }

    const plan& p_;
    std::vector<std::pair<site_id, std::string>> sites_;
    std::chrono::milliseconds len_;
    point_reading start_;
    profile out_;
};

}  // namespace

profile run(const plan& p) {
    check_plan(p);
    bool idle = false;
    if (!g_active.compare_exchange_strong(idle, true))
        throw std::logic_error("smarm::causal::run: another run is active");
    struct release {
        ~release() {
            end();
            g_active.store(false);
        }
    } rel;
    (void)internal::ticks_per_ns();  // calibrated before the first window
    controller c(p);
    c.out().startup_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    if (p.mode == plan::schedule::sweep)
        c.sweep();
    else
        c.randomized();
    return c.take();
}

// ---- cells ----

std::optional<double> profile::cell::rate(const std::string& point) const {
    auto it = throughput.find(point);
    const double v = std::chrono::duration<double>(wall - injected).count();
    if (it == throughput.end() || v <= 0) return std::nullopt;
    return static_cast<double>(it->second) / v;
}

std::vector<profile::cell> profile::cells() const {
    std::vector<cell> out;
    std::vector<std::string> order;
    for (const window& w : windows) {
        if (w.thin) continue;
        if (std::find(order.begin(), order.end(), w.site) == order.end()) order.push_back(w.site);
        auto it = std::find_if(out.begin(), out.end(), [&](const cell& c) {
            return c.site == w.site && c.speedup == w.speedup;
        });
        if (it == out.end()) {
            out.push_back(cell{w.site, w.speedup, 0, {}, {}, {}, {}});
            it = out.end() - 1;
        }
        it->windows++;
        it->wall += w.wall;
        it->injected += w.injected;
        for (const auto& [n, v] : w.throughput)
            it->throughput[n] += v;
        for (const auto& [n, l] : w.latency) {
            latency_sample& c = it->latency[n];
            const double total = static_cast<double>(c.arrivals + l.arrivals);
            if (total > 0)
                c.mean_ns = (c.mean_ns * static_cast<double>(c.arrivals) +
                             l.mean_ns * static_cast<double>(l.arrivals)) /
                            total;
            c.arrivals += l.arrivals;
            c.departures += l.departures;
            c.in_flight = l.in_flight;
        }
    }
    std::stable_sort(out.begin(), out.end(), [&](const cell& a, const cell& b) {
        auto ia = std::find(order.begin(), order.end(), a.site);
        auto ib = std::find(order.begin(), order.end(), b.site);
        return ia != ib ? ia < ib : a.speedup < b.speedup;
    });
    return out;
}

std::optional<profile::cell> profile::find(std::string_view site, unsigned speedup) const {
    for (cell& c : cells())
        if (c.site == site && c.speedup == speedup) return std::move(c);
    return std::nullopt;
}

std::optional<double> profile::impact(std::string_view site, unsigned speedup,
                                      const std::string& point) const {
    const auto c = find(site, speedup);
    const auto b = find(site, 0);
    if (!c || !b) return std::nullopt;
    if (auto r = c->rate(point)) {
        const auto base = b->rate(point);
        if (!base || *base <= 0) return std::nullopt;
        return (*r / *base - 1.0) * 100.0;
    }
    auto lc = c->latency.find(point);
    auto lb = b->latency.find(point);
    if (lc == c->latency.end() || lb == b->latency.end() || lc->second.mean_ns <= 0 ||
        lb->second.arrivals == 0)
        return std::nullopt;
    // Halving the latency reads +100%, on the throughput's scale.
    return (lb->second.mean_ns / lc->second.mean_ns - 1.0) * 100.0;
}

}  // namespace smarm::causal
