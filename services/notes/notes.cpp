#include "notes/notes.hpp"

#include <smarm/monitor.hpp>
#include <smarm/runtime.hpp>

#include <spdlog/spdlog.h>

#include <charconv>

#include "json.hpp"

namespace smarm::services {

namespace pq = smarm::postgres;

std::shared_ptr<pq::pool> notes_state::pool() const {
    std::lock_guard g(mu_);
    return pool_;
}

void notes_state::set_pool(std::shared_ptr<pq::pool> p) {
    std::lock_guard g(mu_);
    pool_ = std::move(p);
}

std::optional<std::string> notes_state::not_ready() const {
    auto p = pool();
    if (!p) return "postgres (starting)";
    if (!p->stats().healthy) return "postgres (unreachable)";
    return std::nullopt;
}

metrics::db_pool_figures notes_state::figures() const {
    metrics::db_pool_figures f;
    auto p = pool();
    if (!p) return f;
    const pq::pool_stats s = p->stats();
    f.size = s.size;
    f.open = s.open;
    f.in_use = s.in_use;
    f.waiting = s.waiting;
    f.checkouts = s.checkouts;
    f.waited = s.waited;
    f.timeouts = s.timeouts;
    f.connect_failures = s.connect_failures;
    f.discarded = s.discarded;
    f.healthy = s.healthy;
    return f;
}

child_spec notes_child(notes_options o, std::shared_ptr<notes_state> st) {
    return {"notes",
            [o, st] {
                auto p = std::make_shared<pq::pool>(o.pool);
                // Until the table exists the routes have no pool: 503.
                for (auto pause = std::chrono::milliseconds(50);;
                     pause = std::min(pause * 2, std::chrono::milliseconds(5000))) {
                    try {
                        p->execute("create table if not exists " + o.table +
                                   " (id bigint primary key, body text not null)");
                        break;
                    } catch (const pq::error& e) {
                        spdlog::error("notes: cannot create the table ({}); retrying in {} ms",
                                      e.what(), pause.count());
                        smarm::sleep(pause);
                    }
                }
                st->set_pool(p);
                struct unset {
                    notes_state& s;
                    ~unset() { s.set_pool(nullptr); }
                } guard{*st};
                // The pool's actor ending is this child's failure: the
                // supervisor restarts it with a fresh pool.
                auto m = smarm::monitor(p->actor());
                (void)m.rx.recv();
                throw std::runtime_error("notes: the postgres pool's actor ended");
            },
            restart_policy::permanent};
}

namespace {

std::optional<std::int64_t> parse_id(std::string_view s) {
    std::int64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size() || s.empty()) return std::nullopt;
    return v;
}

// The reason stays out of the body (it names hosts and sockets); /readyz
// and the smarm_db_pool_* metrics say what is wrong.
http::response unavailable() {
    http::response r(http::status::service_unavailable, "database unavailable\n");
    r.set("Retry-After", "1");
    return r;
}

// Runs a handler body with the database errors mapped to statuses.
template <class F>
http::response guarded(const std::shared_ptr<notes_state>& st, F&& body) {
    auto p = st->pool();
    if (!p) return unavailable();
    try {
        return body(*p);
    } catch (const pq::pool_timeout&) {
        return unavailable();
    } catch (const pq::connection_error&) {
        return unavailable();
    } catch (const pq::timeout&) {
        return http::response(http::status::gateway_timeout, "database statement timed out\n");
    } catch (const pq::error& e) {
        spdlog::error("notes: {}", e.what());
        return http::response(http::status::internal_server_error, "database error\n");
    }
}

}  // namespace

void add_notes_routes(http::router& r, std::shared_ptr<notes_state> st, std::string table) {
    r.get("/notes/{id}", [st, table](http::request& q) {
        auto id = parse_id(q.param("id").value_or(""));
        if (!id) return http::response(http::status::bad_request, "id must be an integer\n");
        return guarded(st, [&](pq::pool& db) {
            auto body =
                db.query_one<std::string>("select body from " + table + " where id = $1", *id);
            if (!body) return http::response(http::status::not_found, "no such note\n");
            return http::response(http::status::ok, std::move(*body), "text/plain; charset=utf-8");
        });
    });
    r.put("/notes/{id}", [st, table](http::request& q) {
        auto id = parse_id(q.param("id").value_or(""));
        if (!id) return http::response(http::status::bad_request, "id must be an integer\n");
        return guarded(st, [&](pq::pool& db) {
            // xmax = 0 only on a freshly inserted row: created or replaced.
            const bool created = *db.query_one<bool>(
                "insert into " + table +
                    " (id, body) values ($1, $2) on conflict (id) do update set body = "
                    "excluded.body returning (xmax = 0)",
                *id, q.body());
            return http::response(created ? http::status::created : http::status::no_content);
        });
    });
    r.del("/notes/{id}", [st, table](http::request& q) {
        auto id = parse_id(q.param("id").value_or(""));
        if (!id) return http::response(http::status::bad_request, "id must be an integer\n");
        return guarded(st, [&](pq::pool& db) {
            const auto n = db.execute("delete from " + table + " where id = $1", *id).affected();
            return n != 0 ? http::response(http::status::no_content)
                          : http::response(http::status::not_found, "no such note\n");
        });
    });
    r.get("/notes", [st, table](http::request& q) {
        std::int64_t limit = 100;
        if (auto l = q.query_param("limit")) {
            auto v = parse_id(*l);
            if (!v || *v < 1 || *v > 1000)
                return http::response(http::status::bad_request, "limit must be 1..1000\n");
            limit = *v;
        }
        std::optional<std::int64_t> after;
        if (auto a = q.query_param("after")) {
            after = parse_id(*a);
            if (!after) return http::response(http::status::bad_request, "after must be an id\n");
        }
        return guarded(st, [&](pq::pool& db) {
            // One more than the page tells whether a next one exists.
            auto rows = db.query<std::int64_t, std::string>(
                "select id, body from " + table +
                    " where $1::bigint is null or id > $1 order by id limit $2",
                after, limit + 1);
            std::string out = "{\"notes\":[";
            const std::size_t n = std::min(rows.size(), static_cast<std::size_t>(limit));
            for (std::size_t i = 0; i < n; ++i) {
                if (i) out += ',';
                out += "{\"id\":" + std::to_string(std::get<0>(rows[i])) + ",\"body\":";
                append_json_string(out, std::get<1>(rows[i]));
                out += '}';
            }
            out += ']';
            if (rows.size() > n) out += ",\"next\":" + std::to_string(std::get<0>(rows[n - 1]));
            out += "}\n";
            return http::response(http::status::ok, std::move(out), "application/json");
        });
    });
}

}  // namespace smarm::services
