#pragma once
// smarm::postgres::pool — a bounded pool of connections shared by actors.
//
//     postgres::pool db({.connection = {.conninfo = "..."}, .size = 10});
//     auto name = db.query_one<std::string>("select name from users where id = $1", id);
//     {
//         auto c = db.checkout();          // a lease: the connection is this actor's
//         auto tx = c->begin();
//         tx.execute("update ...", ...);
//         tx.commit();
//     }                                    // back to the pool
//
// Design: one gen_server actor owns the idle connections and the queue of
// actors waiting for one (FIFO, each with its checkout deadline). A
// checkout is a call that moves a connection to the caller, whose actor
// then runs its statements itself: no message hop per statement, and a
// caller stopped mid-transaction rolls back in its own scope (a process
// group of connection actors would route every statement through a
// mailbox and could not queue waiters fairly). Connecting is done by
// short-lived connector actors, so the pool's actor never waits on the
// network; after a failed connect the next attempt waits a backoff that
// doubles (pool_options::backoff_min..backoff_max), and while that lasts
// a checkout that finds no idle connection fails at once with the
// connect error instead of waiting out its deadline.
//
// A lease returned broken (connection_error, an unconfirmed cancel) or
// still inside a transaction is closed, never reused. Idle connections are
// probed (connection::alive, no round trip) when handed out and every
// pool_options::idle_check, so a server restart costs no failed request
// on a connection that was idle through it.
//
// Errors: checkout() throws pool_timeout when no connection came within
// the deadline, connection_error when the server cannot be reached. Both
// mean "try later" (HTTP 503).
//
// Thread safety: a pool handle is used from actors, any number at once; it
// must not outlive the run. A lease belongs to one actor at a time.

#include <smarm/pid.hpp>
#include <smarm/postgres/postgres.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace smarm::postgres {

/// No connection became free within the checkout deadline.
class pool_timeout : public error {
  public:
    using error::error;
};

struct pool_options {
    /// Each connection's options (conninfo, timeouts, statement hook).
    options connection{};
    /// Connections at most (1..10000).
    std::size_t size = 10;
    /// How long checkout() waits for a connection by default.
    std::chrono::nanoseconds checkout_timeout = std::chrono::seconds(2);
    /// Wait after a failed connect before the next, doubling up to max.
    std::chrono::nanoseconds backoff_min = std::chrono::milliseconds(50);
    std::chrono::nanoseconds backoff_max = std::chrono::seconds(5);
    /// Idle connections are probed this often (and one connect is tried
    /// when none is open, so readiness follows the server without traffic).
    std::chrono::nanoseconds idle_check = std::chrono::seconds(5);
    /// Called in the checking-out actor with the time a checkout waited
    /// (metrics). Must not throw.
    std::function<void(std::chrono::nanoseconds)> on_checkout{};
};

/// A point-in-time view of a pool (no message to its actor).
struct pool_stats {
    std::uint64_t size = 0;        ///< pool_options::size
    std::uint64_t open = 0;        ///< connections open (idle + in use)
    std::uint64_t in_use = 0;      ///< leased out
    std::uint64_t waiting = 0;     ///< checkouts queued
    std::uint64_t connecting = 0;  ///< connects in flight
    std::uint64_t checkouts = 0;   ///< served, ever
    std::uint64_t waited = 0;      ///< of those, the ones that had to queue
    std::uint64_t timeouts = 0;    ///< checkouts that failed (deadline or server down)
    std::uint64_t connect_failures = 0;
    std::uint64_t discarded = 0;  ///< connections closed as broken or mid-transaction
    bool healthy = false;         ///< the last connect worked and no failure since
    std::string last_error;       ///< the last connect failure
};

namespace detail {
struct pool_core;
}

/// A checked-out connection; returns to its pool when destroyed.
class lease {
  public:
    lease() = default;
    lease(lease&& o) noexcept
        : c_(std::move(o.c_)), home_(std::move(o.home_)), error_(std::move(o.error_)) {
        o.c_.reset();
    }
    lease& operator=(lease&& o) noexcept;
    ~lease();
    connection& operator*() { return *c_; }
    connection* operator->() { return &*c_; }
    explicit operator bool() const noexcept { return c_.has_value(); }

  private:
    friend struct detail::pool_core;
    friend class pool;
    void give_back() noexcept;
    std::optional<connection> c_;
    std::shared_ptr<detail::pool_core> home_;
    std::string error_;  // an empty lease: why no connection came
};

class pool {
  public:
    /// Starts the pool's actor (from an actor) and its first connect.
    /// Throws std::invalid_argument naming a bad option.
    explicit pool(pool_options opts);
    pool(pool&&) noexcept;
    pool& operator=(pool&&) noexcept;
    /// Stops the pool's actor; idle connections close, leases still out
    /// close when returned.
    ~pool();

    lease checkout();
    lease checkout(std::chrono::nanoseconds timeout);

    /// One statement on a connection checked out for it.
    template <class... A>
    result execute(std::string_view sql, const A&... args) {
        auto c = checkout();
        return c->execute(sql, args...);
    }
    template <class... T, class... A>
    auto query(std::string_view sql, const A&... args) {
        auto c = checkout();
        return c->template query<T...>(sql, args...);
    }
    template <class... T, class... A>
    auto query_one(std::string_view sql, const A&... args) {
        auto c = checkout();
        return c->template query_one<T...>(sql, args...);
    }

    pool_stats stats() const;
    /// The pool's actor (monitor it to learn the pool ended).
    smarm::pid actor() const noexcept;

  private:
    std::shared_ptr<detail::pool_core> core_;
};

}  // namespace smarm::postgres
