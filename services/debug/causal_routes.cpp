// POST /debug/causal, GET /debug/causal/last (causal_routes.hpp).
//
// State shared by every listener actor: the run in progress (an id and the
// plan's text, for the 409) and the last profile, under one std::mutex held
// only to copy them (never across a park).

#include "causal_routes.hpp"
#include "debug.hpp"

#include <smarm/causal.hpp>
#include <smarm/config/config.hpp>
#include <smarm/progress.hpp>

#include <algorithm>
#include <charconv>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace smarm::services {

namespace {

struct state {
    std::mutex mu;
    std::uint64_t next_id = 1;                    // guarded by mu
    std::uint64_t running_id = 0;                 // guarded by mu; 0: none
    std::string running_what;                     // guarded by mu
    std::shared_ptr<const causal::profile> last;  // guarded by mu
};
state& shared_state() {
    static state s;
    return s;
}

struct bad_parameter : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

std::vector<std::string> split(std::string_view v) {
    std::vector<std::string> out;
    while (!v.empty()) {
        const auto comma = v.find(',');
        if (auto part = v.substr(0, comma); !part.empty()) out.emplace_back(part);
        if (comma == std::string_view::npos) break;
        v.remove_prefix(comma + 1);
    }
    return out;
}

unsigned number(const std::string& name, std::string_view v, unsigned lo, unsigned hi) {
    unsigned n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc{} || end != v.data() + v.size() || n < lo || n > hi)
        throw bad_parameter(name + "=" + std::string(v) + ": want an integer in [" +
                            std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return n;
}

/// A length as config files write it ("30s", "500ms", "2m", bare seconds).
std::chrono::milliseconds duration(const std::string& v) {
    std::chrono::nanoseconds d{0};
    try {
        d = config::parse_duration(v);
    } catch (const std::invalid_argument&) {
    }
    if (d < std::chrono::milliseconds(1) || d > std::chrono::hours(24))
        throw bad_parameter("duration=" + v +
                            ": want a length like 30s, 500ms or 2m (1 ms to a day)");
    return std::chrono::duration_cast<std::chrono::milliseconds>(d);
}

std::size_t site_count(const causal::plan& p) {
    std::size_t sites = p.sites.size();
    if (sites == 0)
        while (!causal::site_name(static_cast<causal::site_id>(sites + 1)).empty())
            ++sites;
    return sites;
}

causal::plan plan_from(const http::request& q) {
    causal::plan p;
    if (auto v = q.form_param("mode")) {
        if (*v == "sweep")
            p.mode = causal::plan::schedule::sweep;
        else if (*v == "randomized")
            p.mode = causal::plan::schedule::randomized;
        else
            throw bad_parameter("mode=" + *v + ": want sweep or randomized");
    }
    if (auto v = q.form_param("speedups")) {
        p.speedups.clear();
        for (const auto& s : split(*v))
            p.speedups.push_back(number("speedups", s, 0, 100));
    }
    if (auto v = q.form_param("window_ms"))
        p.window = std::chrono::milliseconds(number("window_ms", *v, 10, 60'000));
    if (auto v = q.form_param("rounds")) p.rounds = number("rounds", *v, 1, 100);
    if (auto v = q.form_param("experiments")) p.experiments = number("experiments", *v, 1, 10'000);
    if (auto v = q.form_param("sites")) p.sites = split(*v);
    if (auto v = q.form_param("points")) {
        // A live process has hit its points by now; one that does not
        // exist would leave every window thin (doubling to max_window).
        p.points = split(*v);
        const auto progress = progress_point::snapshot();
        const auto latency = latency_point::snapshot();
        for (const auto& n : p.points)
            if (!progress.count(n) && !latency.count(n))
                throw bad_parameter("points=" + n +
                                    ": no such progress or latency point (the http.* points "
                                    "need causal.http: true)");
    }
    if (auto v = q.form_param("duration")) {
        // As many windows as fit: rounds of the sweep, or experiments.
        const auto len = duration(*v);
        const bool sweep = p.mode == causal::plan::schedule::sweep;
        if (q.form_param(sweep ? "rounds" : "experiments"))
            throw bad_parameter(std::string("duration=") + *v + ": give it or " +
                                (sweep ? "rounds" : "experiments") + ", not both");
        const auto per = p.window + p.cooldown;
        if (sweep) {
            const auto cells = static_cast<long>(std::max<std::size_t>(1, site_count(p)) *
                                                 std::max<std::size_t>(1, p.speedups.size()));
            if (len < per * cells)
                throw bad_parameter("duration=" + *v + ": shorter than one round (" +
                                    std::to_string(cells) + " cells of " +
                                    std::to_string(per.count()) +
                                    " ms); lengthen it, or give fewer sites, speedups or a "
                                    "shorter window_ms");
            p.rounds = static_cast<unsigned>(std::clamp<long>(len / (per * cells), 1, 100));
        } else {
            if (len < per)
                throw bad_parameter("duration=" + *v + ": shorter than one window (" +
                                    std::to_string(per.count()) + " ms)");
            p.experiments = static_cast<unsigned>(std::clamp<long>(len / per, 1, 10'000));
        }
    }
    return p;
}

/// The run's length if no window doubles (a thin window makes it longer,
/// up to max_window each).
std::chrono::milliseconds planned(const causal::plan& p) {
    const auto per = p.window + p.cooldown;
    if (p.mode == causal::plan::schedule::randomized) return per * p.experiments;
    return per * static_cast<long>(site_count(p) * p.speedups.size() * p.rounds);
}

http::response render(const causal::profile& pr, const http::request& q) {
    const std::string f = format_of(q, "summary");
    // rank=a,b: a ranking per point; the summary and the plot take the first.
    const auto rank_list = split(q.form_param("rank").value_or(""));
    const std::string rank_by = rank_list.empty() ? std::string() : rank_list.front();
    if (f == "summary")
        return http::response(http::status::ok, causal::render_summary(pr, rank_by),
                              "text/plain; charset=utf-8");
    if (f == "ranking") {
        if (rank_list.empty())
            return http::response(http::status::bad_request,
                                  "format=ranking: name the points in rank=a,b\n");
        std::string text;
        for (const auto& point : rank_list)
            text += causal::render_ranking(pr, point);
        return http::response(http::status::ok, std::move(text), "text/plain; charset=utf-8");
    }
    if (f == "json")
        return http::response(http::status::ok, causal::render_json(pr), "application/json");
    if (f == "coz")
        return http::response(http::status::ok, causal::render_coz(pr),
                              "text/plain; charset=utf-8");
    if (f == "gnuplot") {
        // A script the client runs: it draws to `output` on the client's side.
        const std::string out = q.form_param("output").value_or("causal.svg");
        try {
            return http::response(http::status::ok, causal::render_gnuplot(pr, out, rank_by),
                                  "text/plain; charset=utf-8");
        } catch (const std::invalid_argument&) {
            return http::response(http::status::bad_request,
                                  "output=" + out + ": want a .png or .svg file name\n");
        }
    }
    return http::response(http::status::bad_request,
                          "format=" + f + ": want summary, ranking, json, coz or gnuplot\n");
}

}  // namespace

void add_causal_routes(http::router& r, causal_routes_options o) {
    r.post("/debug/causal", [o](http::request& q) {
        causal::plan p;
        try {
            p = plan_from(q);
        } catch (const bad_parameter& e) {
            return http::response(http::status::bad_request,
                                  std::string("POST /debug/causal: ") + e.what() + "\n");
        }
        if (const auto len = planned(p); len > o.max_run)
            return http::response(http::status::payload_too_large,
                                  "POST /debug/causal: the plan runs " +
                                      std::to_string(len.count() / 1000) + " s, over the " +
                                      std::to_string(o.max_run.count()) + " s limit\n");
        state& st = shared_state();
        std::uint64_t id = 0;
        {
            std::lock_guard g(st.mu);
            if (st.running_id != 0)
                return http::response(http::status::conflict,
                                      "POST /debug/causal: run " + std::to_string(st.running_id) +
                                          " is active (" + st.running_what + ")\n");
            id = st.running_id = st.next_id++;
            st.running_what = std::string(q.target());
        }
        struct release {
            state& st;
            ~release() {
                std::lock_guard g(st.mu);
                st.running_id = 0;
                st.running_what.clear();
            }
        } done{st};
        std::shared_ptr<const causal::profile> pr;
        try {
            pr = std::make_shared<const causal::profile>(causal::run(p));
        } catch (const std::invalid_argument& e) {  // the controller names the field
            return http::response(http::status::bad_request,
                                  std::string("POST /debug/causal: ") + e.what() + "\n");
        } catch (const std::logic_error& e) {  // a run started elsewhere in the process
            return http::response(http::status::conflict,
                                  std::string("POST /debug/causal: ") + e.what() + "\n");
        }
        {
            std::lock_guard g(st.mu);
            st.last = pr;
        }
        http::response res = render(*pr, q);
        res.set("X-Smarm-Causal-Run", std::to_string(id));
        return res;
    });
    r.get("/debug/causal/last", [](http::request& q) {
        std::shared_ptr<const causal::profile> pr;
        {
            state& st = shared_state();
            std::lock_guard g(st.mu);
            pr = st.last;
        }
        if (!pr)
            return http::response(http::status::not_found,
                                  "GET /debug/causal/last: no run has finished yet\n");
        return render(*pr, q);
    });
}

}  // namespace smarm::services
