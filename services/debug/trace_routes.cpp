// GET /debug/trace, GET /debug/trace/flight (trace_routes.hpp).
//
// State shared by every listener actor: whether an interval records (and
// since when, for the 409) and the flight recorder's options, under one
// std::mutex held only to read or flip them (never across a park).

#include "trace_routes.hpp"

#include <smarm/config/config.hpp>
#include <smarm/runtime.hpp>
#include <smarm/trace.hpp>

#include <charconv>
#include <mutex>
#include <stdexcept>
#include <string>

namespace smarm::services {

namespace {

struct state {
    std::mutex mu;
    bool configured = false;    // guarded by mu: the first add_trace_routes set `opts`
    trace_routes_options opts;  // guarded by mu
    bool interval = false;      // guarded by mu: an interval records
    std::chrono::steady_clock::time_point since;  // guarded by mu
    unsigned seconds = 0;                         // guarded by mu
};
state& shared_state() {
    static state s;
    return s;
}

struct bad_parameter : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

trace::options flight_options(const trace_routes_options& o) {
    return {.buffer_bytes = static_cast<std::size_t>(o.buffer), .flight = true};
}

std::size_t max_bytes_of(const http::request& q, const trace_routes_options& o) {
    const auto v = q.form_param("max_bytes");
    if (!v) return static_cast<std::size_t>(o.max_bytes);
    std::uint64_t n = 0;
    try {
        n = config::parse_size(*v);
    } catch (const std::invalid_argument&) {
    }
    // At most 1 GiB: the JSON is built in memory before it is sent.
    if (n < 4096 || n > (std::uint64_t{1} << 30))
        throw bad_parameter("max_bytes=" + *v + ": want a size like 16MiB (4 KiB to 1 GiB)");
    return static_cast<std::size_t>(n);
}

unsigned seconds_of(const http::request& q, const trace_routes_options& o) {
    const std::string v = q.form_param("seconds").value_or("5");
    unsigned n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    const auto hi = static_cast<unsigned>(o.max_seconds.count());
    if (ec != std::errc{} || end != v.data() + v.size() || n < 1 || n > hi)
        throw bad_parameter("seconds=" + v + ": want an integer in [1, " + std::to_string(hi) +
                            "]");
    return n;
}

http::response trace_response(std::size_t max_bytes) {
    trace::summary sum;
    std::string json = trace::to_json({.max_bytes = max_bytes}, &sum);
    http::response r(http::status::ok, std::move(json), "application/json");
    r.set("X-Trace-Events", std::to_string(sum.events));
    r.set("X-Trace-Dropped", std::to_string(sum.dropped));
    r.set("X-Trace-Cut", std::to_string(sum.cut));
    return r;
}

http::response record_interval(const http::request& q) {
    state& st = shared_state();
    trace_routes_options o;
    unsigned seconds = 0;
    std::size_t cap = 0;
    {
        std::lock_guard lk(st.mu);
        o = st.opts;
        try {
            seconds = seconds_of(q, o);
            cap = max_bytes_of(q, o);
        } catch (const bad_parameter& e) {
            return http::response(http::status::bad_request, std::string(e.what()) + "\n");
        }
        if (st.interval) {
            const auto age = std::chrono::duration_cast<std::chrono::seconds>(
                std::chrono::steady_clock::now() - st.since);
            return http::response(http::status::conflict,
                                  "a " + std::to_string(st.seconds) +
                                      " s trace is already recording (started " +
                                      std::to_string(age.count()) + " s ago)\n");
        }
        st.interval = true;
        st.since = std::chrono::steady_clock::now();
        st.seconds = seconds;
    }
    // Whatever ends the request (a stop while sleeping), the interval ends
    // and the flight recorder comes back.
    struct end_interval {
        state& st;
        const trace_routes_options& o;
        ~end_interval() {
            std::lock_guard lk(st.mu);
            st.interval = false;
            if (!o.flight) {
                trace::stop();
                return;
            }
            try {  // a destructor: out of memory leaves tracing off
                trace::start(flight_options(o));
            } catch (const std::exception&) {
                trace::stop();
            }
        }
    };
    http::response res(http::status::ok);
    {
        end_interval ends{st, o};
        trace::start({.buffer_bytes = static_cast<std::size_t>(o.buffer), .flight = false});
        // A wall sleep: a causal experiment's virtual time must not stretch
        // the interval asked for.
        smarm::sleep_wall(std::chrono::seconds(seconds));
        trace::stop();
        res = trace_response(cap);
    }
    return res;
}

http::response dump_flight(const http::request& q) {
    state& st = shared_state();
    trace_routes_options o;
    {
        std::lock_guard lk(st.mu);
        o = st.opts;
        if (!o.flight)
            return http::response(http::status::conflict,
                                  "no flight recorder runs (trace.flight is false); "
                                  "GET /debug/trace?seconds=N records an interval\n");
        if (st.interval)
            return http::response(http::status::conflict,
                                  "an interval recording has replaced the flight recorder; "
                                  "it comes back when that ends\n");
    }
    try {
        return trace_response(max_bytes_of(q, o));
    } catch (const bad_parameter& e) {
        return http::response(http::status::bad_request, std::string(e.what()) + "\n");
    }
}

}  // namespace

void add_trace_routes(http::router& r, trace_routes_options o) {
    {
        state& st = shared_state();
        std::lock_guard lk(st.mu);
        if (!st.configured) {
            st.configured = true;
            st.opts = o;
            // Not over a recording someone else began (SMARM_TRACE=path).
            if (o.flight && !trace::recording()) trace::start(flight_options(o));
        }
    }
    r.get("/debug/trace", [](http::request& q) { return record_interval(q); });
    r.get("/debug/trace/flight", [](http::request& q) { return dump_flight(q); });
}

}  // namespace smarm::services
