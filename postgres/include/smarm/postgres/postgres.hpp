#pragma once
// smarm::postgres — a PostgreSQL client for actors, on libpq's non-blocking
// API.
//
//     auto db = smarm::postgres::connection::connect({.conninfo = "host=/run/pg dbname=app"});
//     db.execute("insert into notes(id, body) values ($1, $2)", 7, std::string("hi"));
//     for (auto [id, body] : db.query<std::int64_t, std::string>("select id, body from notes"))
//         ...;
//     auto one = db.query_one<std::string>("select body from notes where id = $1", 7);
//
// Every call parks only the calling actor: the socket is waited on with
// smarm's fd waits (never a blocking libpq call on a scheduler thread; the
// connection's start, which may resolve a host name, and a cancel request
// run on the blocking pool). Values travel as query parameters ($1, $2,
// ...), never spliced into the SQL text. Each distinct statement text is
// prepared once per connection and cached (options::statement_cache).
//
// Deadlines: every query has one (options::query_timeout, or a `within`
// first argument). When it passes, a cancel request is sent to the server,
// the query's end is awaited for a bounded grace, and postgres::timeout is
// thrown; the connection stays usable when the server confirmed the cancel.
//
// Errors are exceptions derived from postgres::error: server_error (the
// server refused: SQLSTATE, message, detail), connection_error (cannot
// connect, or the connection broke: the connection is then !ok() and must
// be dropped), timeout, and type_error (a result read as a C++ type it does
// not hold; a programming error, the connection stays usable).
//
// Thread safety: a connection belongs to one actor at a time (move it to
// hand it over); it is not for concurrent use.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// libpq's own struct tags (PGconn, PGresult), declared so this header does
// not pull in libpq-fe.h.
struct pg_conn;
struct pg_result;

namespace smarm::postgres {

/// Anything this module throws.
class error : public std::runtime_error {
  public:
    explicit error(const std::string& what, std::string sqlstate = {})
        : std::runtime_error(what), sqlstate_(std::move(sqlstate)) {}
    /// The five-character SQLSTATE ("23505" unique violation, "57014"
    /// cancelled, "08006" connection failure, ...); empty when none applies.
    const std::string& sqlstate() const noexcept { return sqlstate_; }

  private:
    std::string sqlstate_;
};

/// The server refused the statement; what() is "SQLSTATE: message".
class server_error : public error {
  public:
    server_error(const std::string& what, std::string sqlstate, std::string message,
                 std::string detail)
        : error(what, std::move(sqlstate)),
          message_(std::move(message)),
          detail_(std::move(detail)) {}
    const std::string& message() const noexcept { return message_; }
    const std::string& detail() const noexcept { return detail_; }

  private:
    std::string message_, detail_;
};

/// Cannot connect, or the connection broke (the connection is !ok()).
class connection_error : public error {
  public:
    using error::error;
};

/// The deadline passed; the query was cancelled on the server.
class timeout : public error {
  public:
    using error::error;
};

/// A result column read as a C++ type it does not hold, a NULL read as a
/// non-optional, or a row shape that does not match query<T...>.
class type_error : public error {
  public:
    using error::error;
};

/// A bytea value (sent and read as raw bytes).
struct bytes {
    std::vector<std::byte> data;
    friend bool operator==(const bytes&, const bytes&) = default;
};

/// A deadline for one call, as its first argument:
/// `db.execute(postgres::within{2s}, "...", args...)`.
struct within {
    std::chrono::nanoseconds timeout;
};

struct options {
    /// A libpq connection string ("host=/tmp port=5432 dbname=app user=svc")
    /// or URI ("postgresql://svc@db:5432/app").
    std::string conninfo{};
    /// Connecting (TCP, TLS, authentication) gives up after this.
    std::chrono::nanoseconds connect_timeout = std::chrono::seconds(10);
    /// The deadline of a call given no `within`.
    std::chrono::nanoseconds query_timeout = std::chrono::seconds(30);
    /// After a deadline, how long to wait for the server to confirm the
    /// cancel before the connection is given up (closed).
    std::chrono::nanoseconds cancel_grace = std::chrono::seconds(5);
    /// Statements kept prepared per connection; past it a statement runs
    /// unprepared (0 = never prepare).
    std::size_t statement_cache = 256;
    /// Called after every statement in the calling actor with its duration
    /// and SQLSTATE ("" when it succeeded; "57014" a deadline, "08006" a
    /// broken connection): where metrics hook in. Must not throw.
    std::function<void(std::chrono::nanoseconds, std::string_view sqlstate)> on_statement{};
};

namespace detail {
/// One parameter as libpq takes it.
struct param {
    unsigned oid = 0;  // 0: the server infers the type from the statement
    bool null = false;
    bool binary = false;
    std::string value;
};

param encode(bool v);
param encode(std::int16_t v);
param encode(std::int32_t v);
param encode(std::int64_t v);
param encode(float v);
param encode(double v);
param encode(std::string_view v);
param encode(const bytes& v);
param encode(std::nullopt_t);
inline param encode(const std::string& v) {
    return encode(std::string_view(v));
}
inline param encode(const char* v) {
    return encode(std::string_view(v));
}
template <class T>
param encode(const std::optional<T>& v) {
    return v ? encode(*v) : encode(std::nullopt);
}
// Other integer widths map onto the three PostgreSQL has.
template <class T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, std::int16_t> &&
         !std::is_same_v<T, std::int32_t> && !std::is_same_v<T, std::int64_t> &&
         !std::is_same_v<T, char>) param encode(T v) {
    if constexpr (std::is_signed_v<T> && sizeof(T) <= 4)
        return encode(static_cast<std::int32_t>(v));
    else if constexpr (std::is_signed_v<T>)
        return encode(static_cast<std::int64_t>(v));
    else if constexpr (sizeof(T) < 4)
        return encode(static_cast<std::int32_t>(v));
    else {
        static_assert(sizeof(T) <= 8);
        if (static_cast<std::uint64_t>(v) > static_cast<std::uint64_t>(INT64_MAX))
            throw type_error("postgres: an unsigned parameter " + std::to_string(v) +
                             " does not fit bigint");
        return encode(static_cast<std::int64_t>(v));
    }
}

/// A column's text value decoded into `out` (throws type_error naming the
/// column, its type and the C++ type). `oid` is the column's type.
void decode(std::string_view text, unsigned oid, const char* column, bool& out);
void decode(std::string_view text, unsigned oid, const char* column, std::int16_t& out);
void decode(std::string_view text, unsigned oid, const char* column, std::int32_t& out);
void decode(std::string_view text, unsigned oid, const char* column, std::int64_t& out);
void decode(std::string_view text, unsigned oid, const char* column, float& out);
void decode(std::string_view text, unsigned oid, const char* column, double& out);
void decode(std::string_view text, unsigned oid, const char* column, std::string& out);
void decode(std::string_view text, unsigned oid, const char* column, bytes& out);
[[noreturn]] void throw_null(const char* column);

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

struct result_deleter {
    void operator()(pg_result* r) const noexcept;
};
}  // namespace detail

/// One row of a result (a view: valid while its result lives).
class row {
  public:
    int size() const noexcept;
    bool is_null(int column) const;
    /// The column's name.
    const char* name(int column) const;
    /// The column read as T (bool, the integers, float, double,
    /// std::string, bytes, or std::optional of one: NULL is nullopt).
    template <class T>
    T get(int column) const {
        check(column);
        if constexpr (detail::is_optional<T>::value) {
            if (is_null(column)) return std::nullopt;
            return get<typename T::value_type>(column);
        } else {
            if (is_null(column)) detail::throw_null(name(column));
            T out{};
            detail::decode(text(column), type(column), name(column), out);
            return out;
        }
    }
    /// By column name (type_error when there is none).
    template <class T>
    T get(std::string_view column) const {
        return get<T>(index(column));
    }
    /// The whole row as a tuple (the column count must match).
    template <class... T>
    std::tuple<T...> as() const {
        if (size() != static_cast<int>(sizeof...(T))) throw_arity(sizeof...(T));
        return as_impl<T...>(std::index_sequence_for<T...>{});
    }

  private:
    friend class result;
    row(const pg_result* r, int i) noexcept : r_(r), i_(i) {}
    std::string_view text(int column) const;
    unsigned type(int column) const;
    int index(std::string_view column) const;
    void check(int column) const;
    [[noreturn]] void throw_arity(std::size_t wanted) const;
    template <class... T, std::size_t... I>
    std::tuple<T...> as_impl(std::index_sequence<I...>) const {
        return std::tuple<T...>(get<T>(static_cast<int>(I))...);
    }
    const pg_result* r_;
    int i_;
};

/// A statement's result: its rows and, for INSERT/UPDATE/DELETE, the rows
/// it touched. Move-only; owns libpq's result.
class result {
  public:
    result() = default;
    int size() const noexcept;
    bool empty() const noexcept { return size() == 0; }
    int columns() const noexcept;
    /// Rows inserted, updated, deleted (or selected); 0 when not reported.
    std::uint64_t affected() const noexcept;
    row operator[](int i) const;

    class iterator {
      public:
        using value_type = row;
        using difference_type = std::ptrdiff_t;
        iterator() = default;
        row operator*() const noexcept { return row(r_, i_); }
        iterator& operator++() noexcept {
            ++i_;
            return *this;
        }
        iterator operator++(int) noexcept {
            iterator t = *this;
            ++i_;
            return t;
        }
        friend bool operator==(const iterator&, const iterator&) = default;

      private:
        friend class result;
        iterator(const pg_result* r, int i) noexcept : r_(r), i_(i) {}
        const pg_result* r_ = nullptr;
        int i_ = 0;
    };
    iterator begin() const noexcept { return iterator(r_.get(), 0); }
    iterator end() const noexcept { return iterator(r_.get(), size()); }

  private:
    friend class connection;
    explicit result(pg_result* r) noexcept : r_(r) {}
    std::unique_ptr<pg_result, detail::result_deleter> r_;
};

class transaction;

/// A statement and its arguments, for connection::pipeline.
class statement {
  public:
    template <class... A>
    explicit statement(std::string_view sql, const A&... args)
        : sql_(sql), ps_{detail::encode(args)...} {}

  private:
    friend class connection;
    std::string sql_;
    std::vector<detail::param> ps_;
};

/// One connection to a server. Move-only; closed by its destructor.
class connection {
  public:
    /// Connects (parks until the server accepted, or throws
    /// connection_error naming the server's reason). From an actor.
    static connection connect(const options& opts);
    /// Throws std::invalid_argument when `conninfo` is not a valid libpq
    /// connection string or URI (the message is libpq's, never the value:
    /// it may hold a password). No connection is made.
    static void check_conninfo(const std::string& conninfo);

    connection(connection&&) noexcept;
    connection& operator=(connection&&) noexcept;
    ~connection();

    /// Runs `sql` with `args` as $1, $2, ...; an optional `within` first.
    template <class... A>
    result execute(std::string_view sql, const A&... args) {
        return run(opts_.query_timeout, sql, args...);
    }
    template <class... A>
    result execute(within w, std::string_view sql, const A&... args) {
        return run(w.timeout, sql, args...);
    }

    /// The rows as T (one type) or std::tuple<T...>.
    template <class... T, class... A>
    auto query(std::string_view sql, const A&... args) {
        return rows_as<T...>(execute(sql, args...));
    }
    template <class... T, class... A>
    auto query(within w, std::string_view sql, const A&... args) {
        return rows_as<T...>(execute(w, sql, args...));
    }
    /// The first row as T or std::tuple<T...>; nullopt when none.
    template <class... T, class... A>
    auto query_one(std::string_view sql, const A&... args) {
        return first_as<T...>(execute(sql, args...));
    }
    template <class... T, class... A>
    auto query_one(within w, std::string_view sql, const A&... args) {
        return first_as<T...>(execute(w, sql, args...));
    }

    /// Sends every statement at once and reads their results after (one
    /// round trip instead of one per statement: libpq's pipeline mode).
    /// They run as one implicit transaction unless a transaction is open:
    /// if one fails, none of them takes effect and its server_error is
    /// thrown. One deadline for the whole pipeline. The statements are not
    /// prepared (statement_cache does not apply).
    std::vector<result> pipeline(std::span<const statement> sts) {
        return run_pipeline(opts_.query_timeout, sts);
    }
    std::vector<result> pipeline(within w, std::span<const statement> sts) {
        return run_pipeline(w.timeout, sts);
    }
    std::vector<result> pipeline(std::initializer_list<statement> sts) {
        return run_pipeline(opts_.query_timeout, {sts.begin(), sts.size()});
    }

    /// BEGIN; the transaction rolls back unless committed.
    transaction begin();

    /// False once the connection broke (a connection_error was thrown, or
    /// a cancel went unconfirmed): drop it and connect again.
    bool ok() const noexcept;
    /// Reads what the server sent meanwhile without waiting and says
    /// whether the connection is still usable: an idle connection whose
    /// server restarted (or closed it) is found dead here.
    bool alive() noexcept;
    /// Inside a transaction block (BEGIN issued, not yet ended).
    bool in_transaction() const noexcept;
    /// The backend's process id (pg_stat_activity.pid).
    int backend_pid() const noexcept;
    /// Statements prepared on this connection so far (cached).
    std::size_t prepared() const noexcept;

  private:
    friend class transaction;
    struct state;
    explicit connection(std::unique_ptr<state> s, const options& opts);
    template <class... A>
    result run(std::chrono::nanoseconds timeout, std::string_view sql, const A&... args) {
        const std::array<detail::param, sizeof...(A)> ps{detail::encode(args)...};
        return run_params(timeout, sql, std::span<const detail::param>(ps.data(), ps.size()));
    }
    result run_params(std::chrono::nanoseconds timeout, std::string_view sql,
                      std::span<const detail::param> ps);
    result run_untimed(std::chrono::nanoseconds timeout, std::string_view sql,
                       std::span<const detail::param> ps);
    std::vector<result> run_pipeline(std::chrono::nanoseconds timeout,
                                     std::span<const statement> sts);
    template <class... T>
    static auto rows_as(const result& r) {
        using R = std::conditional_t<sizeof...(T) == 1, std::tuple_element_t<0, std::tuple<T...>>,
                                     std::tuple<T...>>;
        std::vector<R> out;
        out.reserve(static_cast<std::size_t>(r.size()));
        for (row x : r)
            out.push_back(one_as<T...>(x));
        return out;
    }
    template <class... T>
    static auto first_as(const result& r) {
        using R = std::conditional_t<sizeof...(T) == 1, std::tuple_element_t<0, std::tuple<T...>>,
                                     std::tuple<T...>>;
        if (r.empty()) return std::optional<R>();
        return std::optional<R>(one_as<T...>(r[0]));
    }
    template <class... T>
    static auto one_as(row x) {
        if constexpr (sizeof...(T) == 1)
            return std::get<0>(x.as<T...>());
        else
            return x.as<T...>();
    }

    std::unique_ptr<state> s_;
    options opts_;
};

/// A transaction block: BEGIN at construction (connection::begin), COMMIT
/// by commit(); otherwise ROLLBACK when it goes out of scope (including
/// while unwinding, an actor's stop too). If the rollback cannot be sent
/// the connection is closed, which makes the server roll back.
class transaction {
  public:
    transaction(transaction&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
    transaction& operator=(transaction&&) = delete;
    ~transaction();

    template <class... A>
    result execute(std::string_view sql, const A&... args) {
        return conn().execute(sql, args...);
    }
    template <class... A>
    result execute(within w, std::string_view sql, const A&... args) {
        return conn().execute(w, sql, args...);
    }
    template <class... T, class... A>
    auto query(std::string_view sql, const A&... args) {
        return conn().template query<T...>(sql, args...);
    }
    template <class... T, class... A>
    auto query_one(std::string_view sql, const A&... args) {
        return conn().template query_one<T...>(sql, args...);
    }
    void commit();
    void rollback();

  private:
    friend class connection;
    explicit transaction(connection& c) noexcept : c_(&c) {}
    connection& conn() const;
    connection* c_;
};

}  // namespace smarm::postgres
