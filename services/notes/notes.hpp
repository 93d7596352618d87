#pragma once
// The notes service: a table in PostgreSQL behind HTTP routes, the example
// of a handler that talks to a database (smarm::postgres).
//
//   GET    /notes/{id}   200 with the note's text, or 404
//   PUT    /notes/{id}   201 when new, 204 when replaced (body = the text)
//   DELETE /notes/{id}   204, or 404
//   GET    /notes        ids and texts in id order, paginated: ?limit=N
//                        (default 100, at most 1000) &after=ID; JSON
//                        {"notes":[{"id":1,"body":"..."}],"next":ID}
//   {id} is a signed 64-bit integer (else 400). The database down or every
//   connection busy past postgres.checkout_timeout: 503 with Retry-After; a
//   statement past postgres.query_timeout: 504 (cancelled on the server).
//
// Handlers run in the request's own actor and check a connection out of a
// pool (postgres/pool.hpp) for each request. notes_child is the supervised
// owner of the pool: it starts it, creates the table (retrying with
// backoff while the database cannot be reached; the routes answer 503
// until then) and ends, to be restarted, if the pool's actor ends.

#include <smarm/http/router.hpp>
#include <smarm/metrics/metrics.hpp>
#include <smarm/postgres/pool.hpp>
#include <smarm/supervisor.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace smarm::services {

struct notes_options {
    postgres::pool_options pool;
    std::string table = "notes";  ///< created when missing
};

/// What the routes, readiness and metrics share with the pool's owner.
class notes_state {
  public:
    /// The pool once the table exists (null before, and between restarts).
    std::shared_ptr<postgres::pool> pool() const;
    void set_pool(std::shared_ptr<postgres::pool> p);
    /// Why the service cannot serve now, or nullopt.
    std::optional<std::string> not_ready() const;
    metrics::db_pool_figures figures() const;

  private:
    mutable std::mutex mu_;
    std::shared_ptr<postgres::pool> pool_;  // guarded by mu_
};

/// The supervised owner of the pool (permanent).
child_spec notes_child(notes_options o, std::shared_ptr<notes_state> st);
void add_notes_routes(http::router& r, std::shared_ptr<notes_state> st,
                      std::string table = "notes");

}  // namespace smarm::services
