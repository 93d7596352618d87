// The connection: libpq in non-blocking mode, waited on with smarm's fd
// waits. The protocol with libpq (its "Asynchronous Command Processing"
// rules): after a send, PQflush until it returns 0, waiting for the socket
// to be writable or readable (a server busy writing must be read from
// before it reads more); then, for every PQgetResult, PQconsumeInput while
// PQisBusy, waiting for readable in between. PQgetResult is never called
// while busy (it would block the scheduler thread).
//
// A connection's state is consistent only between calls: anything that
// leaves a call early with a statement still in flight (a stop, a broken
// socket, a cancel the server never confirmed) marks it broken, and a
// broken connection refuses every further call.

#include <smarm/io.hpp>
#include <smarm/postgres/postgres.hpp>

#include <libpq-fe.h>

#include "text.hpp"

#include <string>
#include <unordered_map>

namespace smarm::postgres {

namespace {

using clock_type = std::chrono::steady_clock;

using internal::ms_text;

std::string trimmed(const char* s) {
    std::string out = s != nullptr ? s : "";
    while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
        out.pop_back();
    return out;
}

// A call needs a usable connection and a positive deadline.
void check_call(bool usable, std::chrono::nanoseconds timeout) {
    if (!usable)
        throw connection_error("postgres: the connection is closed or broken; connect again",
                               "08003");
    if (timeout <= std::chrono::nanoseconds::zero())
        throw std::invalid_argument("smarm::postgres: a statement's timeout must be > 0");
}

// Parks until the socket is readable (writable when `write`), or the
// deadline passes (false). One direction at a time (a descriptor takes one
// fd wait per actor); a flush that cannot finish reads in between instead
// (state::flush).
bool wait_socket(int fd, bool write, clock_type::time_point deadline) {
    const auto left = deadline - clock_type::now();
    if (left <= clock_type::duration::zero()) return false;
    return write ? smarm::wait_writable(fd, left) : smarm::wait_readable(fd, left);
}

// Parameters as libpq's parallel arrays (views into the params).
struct libpq_params {
    std::vector<Oid> oids;
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    explicit libpq_params(std::span<const detail::param> ps)
        : oids(ps.size()), values(ps.size()), lengths(ps.size()), formats(ps.size()) {
        for (std::size_t i = 0; i < ps.size(); ++i) {
            oids[i] = ps[i].oid;
            values[i] = ps[i].null ? nullptr : ps[i].value.data();
            lengths[i] = static_cast<int>(ps[i].value.size());
            formats[i] = ps[i].binary ? 1 : 0;
        }
    }
    int size() const noexcept { return static_cast<int>(oids.size()); }
};

// Anything leaving a call before its statements ended leaves the protocol
// mid-statement: the connection is then broken (see the top). settle()
// runs one exchange; an error the server answered in full (server_error,
// a confirmed cancel) leaves the connection consistent.
struct in_flight {
    bool& broken;
    bool done = false;
    ~in_flight() {
        if (!done) broken = true;
    }
    template <class F>
    auto settle(F&& f) {
        try {
            return f();
        } catch (const server_error&) {
            done = true;
            throw;
        } catch (const postgres::timeout&) {
            if (!broken) done = true;
            throw;
        }
    }
};

}  // namespace

void detail::result_deleter::operator()(pg_result* r) const noexcept {
    PQclear(r);
}

struct connection::state {
    PGconn* pg = nullptr;
    bool broken = false;
    // Statement text + parameter types -> prepared statement name.
    std::unordered_map<std::string, std::string> statements;
    std::uint64_t next_statement = 0;

    ~state() {
        if (pg != nullptr) PQfinish(pg);
    }

    [[noreturn]] void fail(const std::string& what) {
        broken = true;
        throw connection_error("postgres: " + what + ": " + trimmed(PQerrorMessage(pg)), "08006");
    }

    // One call's deadline and what happened to it.
    struct clock_state {
        clock_type::time_point deadline;
        std::chrono::nanoseconds timeout, grace;
        bool timed_out = false;
    };
    using owned = std::unique_ptr<pg_result, detail::result_deleter>;

    // Sends what libpq buffered. While the send cannot finish, what the
    // server sent is read in between (at least every millisecond), so a
    // server blocked writing results to us (a pipeline) makes progress.
    void flush(const clock_state& c) {
        for (;;) {
            const int r = PQflush(pg);
            if (r == 0) return;
            if (r < 0) fail("sending failed");
            const auto now = clock_type::now();
            if (now >= c.deadline) {
                // Not even sent whole: the protocol stream is cut mid-message.
                broken = true;
                throw postgres::timeout("postgres: the statement could not be sent within " +
                                            ms_text(c.timeout) + "; the connection is closed",
                                        "57014");
            }
            (void)smarm::wait_writable(
                PQsocket(pg),
                std::min<clock_type::duration>(c.deadline - now, std::chrono::milliseconds(1)));
            if (PQconsumeInput(pg) == 0) fail("the connection broke");
        }
    }

    // Reads until a result is ready without blocking. At the deadline the
    // statement is cancelled once and `grace` more is given; past that the
    // connection is given up.
    void until_ready(clock_state& c) {
        while (PQisBusy(pg) != 0) {
            if (wait_socket(PQsocket(pg), false, c.deadline)) {
                if (PQconsumeInput(pg) == 0) fail("the connection broke");
                continue;
            }
            if (c.timed_out) {
                broken = true;
                throw postgres::timeout("postgres: the statement exceeded its deadline of " +
                                            ms_text(c.timeout) +
                                            " and the server did not confirm the cancel within " +
                                            ms_text(c.grace) + "; the connection is closed",
                                        "57014");
            }
            c.timed_out = true;
            cancel();
            c.deadline = clock_type::now() + c.grace;
        }
    }

    // Asks the server to cancel what runs (a blocking call: on the pool).
    void cancel() {
        PGcancel* c = PQgetCancel(pg);
        if (c == nullptr) return;
        smarm::block_on_io([c] {
            char buf[256];
            return PQcancel(c, buf, sizeof buf);
        });
        PQfreeCancel(c);
    }

    // The results of one statement, up to libpq's end-of-statement NULL:
    // the last one, and the first failure. In a pipeline, a statement
    // after a failure reports PGRES_PIPELINE_ABORTED (neither).
    std::pair<owned, owned> drain_one(clock_state& c) {
        owned last, failed;
        for (;;) {
            until_ready(c);
            PGresult* r = PQgetResult(pg);
            if (r == nullptr) break;
            owned res(r);
            const ExecStatusType st = PQresultStatus(r);
            if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR) {
                if (!failed) failed = std::move(res);
            } else if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
                broken = true;
                throw error(
                    "postgres: COPY is not supported through execute(); the connection "
                    "is closed",
                    "0A000");
            } else if (st == PGRES_PIPELINE_SYNC) {
                last = std::move(res);
                break;  // a sync is a statement of its own, without a NULL after it
            } else if (st != PGRES_PIPELINE_ABORTED) {
                last = std::move(res);
            }
        }
        return {std::move(last), std::move(failed)};
    }

    void finish_checks(const clock_state& c) {
        if (PQstatus(pg) == CONNECTION_BAD) fail("the connection broke");
        if (c.timed_out)
            throw postgres::timeout("postgres: the statement exceeded its deadline of " +
                                        ms_text(c.timeout) + " and was cancelled on the server",
                                    "57014");
    }

    // Collects every result of the statement sent; gives back the last.
    result collect(clock_state c) {
        flush(c);
        auto [last, failed] = drain_one(c);
        finish_checks(c);
        if (failed) throw_server(failed.get());
        return result(last.release());
    }

    // Collects a pipeline of `n` statements and its closing sync.
    std::vector<result> collect_pipeline(std::size_t n, clock_state c) {
        flush(c);
        std::vector<result> out;
        owned first_failure;
        for (std::size_t i = 0; i < n; ++i) {
            auto [last, failed] = drain_one(c);
            if (failed && !first_failure) first_failure = std::move(failed);
            out.push_back(result(last.release()));
        }
        auto [sync, failed] = drain_one(c);
        if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
            broken = true;
            throw error("postgres: the pipeline ended without its sync; the connection is closed",
                        "08P01");
        }
        // Out of pipeline mode before any throw: a connection left in it
        // would queue the next statement without a sync, unanswered.
        if (PQexitPipelineMode(pg) == 0) fail("cannot leave pipeline mode");
        finish_checks(c);
        if (first_failure) throw_server(first_failure.get());
        return out;
    }

    [[noreturn]] static void throw_server(const PGresult* r) {
        const char* code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char* msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        const char* det = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
        std::string sqlstate = code != nullptr ? code : "";
        std::string message = msg != nullptr ? msg : trimmed(PQresultErrorMessage(r));
        std::string what = "postgres: " + (sqlstate.empty() ? "" : sqlstate + ": ") + message;
        if (det != nullptr) what += " (" + std::string(det) + ")";
        throw server_error(what, std::move(sqlstate), std::move(message),
                           det != nullptr ? det : "");
    }
};

connection::connection(std::unique_ptr<state> s, const options& opts)
    : s_(std::move(s)), opts_(opts) {}
connection::connection(connection&&) noexcept = default;
connection& connection::operator=(connection&&) noexcept = default;
connection::~connection() = default;

connection connection::connect(const options& opts) {
    if (opts.connect_timeout <= std::chrono::nanoseconds::zero() ||
        opts.query_timeout <= std::chrono::nanoseconds::zero() ||
        opts.cancel_grace <= std::chrono::nanoseconds::zero())
        throw std::invalid_argument(
            "smarm::postgres::options: connect_timeout, query_timeout and cancel_grace must be > "
            "0");
    auto s = std::make_unique<state>();
    // PQconnectStart may resolve the host name: a blocking call.
    const std::string conninfo = opts.conninfo;
    s->pg = smarm::block_on_io([&conninfo] { return PQconnectStart(conninfo.c_str()); });
    if (s->pg == nullptr) throw connection_error("postgres: out of memory connecting", "08001");
    if (PQstatus(s->pg) == CONNECTION_BAD)
        throw connection_error("postgres: cannot connect: " + trimmed(PQerrorMessage(s->pg)),
                               "08001");
    PQsetNoticeProcessor(
        s->pg, [](void*, const char*) {}, nullptr);
    const auto deadline = clock_type::now() + opts.connect_timeout;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    for (;;) {
        if (st == PGRES_POLLING_OK) break;
        if (st == PGRES_POLLING_FAILED)
            throw connection_error("postgres: cannot connect: " + trimmed(PQerrorMessage(s->pg)),
                                   "08001");
        if (!wait_socket(PQsocket(s->pg), st == PGRES_POLLING_WRITING, deadline))
            throw connection_error(
                "postgres: cannot connect: no answer within " + ms_text(opts.connect_timeout),
                "08001");
        st = PQconnectPoll(s->pg);
    }
    if (PQsetnonblocking(s->pg, 1) != 0)
        throw connection_error(
            "postgres: cannot make the connection non-blocking: " + trimmed(PQerrorMessage(s->pg)),
            "08001");
    return connection(std::move(s), opts);
}

void connection::check_conninfo(const std::string& conninfo) {
    char* err = nullptr;
    PQconninfoOption* o = PQconninfoParse(conninfo.c_str(), &err);
    if (o != nullptr) {
        PQconninfoFree(o);
        return;
    }
    const std::string why = err != nullptr ? trimmed(err) : "out of memory";
    if (err != nullptr) PQfreemem(err);
    throw std::invalid_argument("postgres: not a connection string or URI: " + why);
}

bool connection::ok() const noexcept {
    return s_ && !s_->broken && PQstatus(s_->pg) == CONNECTION_OK;
}

bool connection::in_transaction() const noexcept {
    if (!s_) return false;
    const PGTransactionStatusType t = PQtransactionStatus(s_->pg);
    return t == PQTRANS_INTRANS || t == PQTRANS_INERROR;
}

int connection::backend_pid() const noexcept {
    return s_ ? PQbackendPID(s_->pg) : 0;
}

std::size_t connection::prepared() const noexcept {
    return s_ ? s_->statements.size() : 0;
}

bool connection::alive() noexcept {
    if (!ok()) return false;
    if (PQconsumeInput(s_->pg) == 0 || PQstatus(s_->pg) != CONNECTION_OK) s_->broken = true;
    return ok();
}

result connection::run_params(std::chrono::nanoseconds timeout, std::string_view sql,
                              std::span<const detail::param> ps) {
    if (!opts_.on_statement) return run_untimed(timeout, sql, ps);
    const auto t0 = clock_type::now();
    try {
        result r = run_untimed(timeout, sql, ps);
        opts_.on_statement(clock_type::now() - t0, "");
        return r;
    } catch (const error& e) {
        opts_.on_statement(clock_type::now() - t0, e.sqlstate());
        throw;
    }
}

result connection::run_untimed(std::chrono::nanoseconds timeout, std::string_view sql,
                               std::span<const detail::param> ps) {
    check_call(ok(), timeout);
    const libpq_params lp(ps);
    std::string key(sql);
    key += '\0';
    for (const auto& p : ps) {
        key += std::to_string(p.oid);
        key += ',';
    }
    const std::string text(sql);
    const auto deadline = clock_type::now() + timeout;
    state& s = *s_;
    in_flight g{s.broken};
    auto it = s.statements.find(key);
    if (it == s.statements.end() && s.statements.size() < opts_.statement_cache) {
        std::string name = "smarm_" + std::to_string(s.next_statement++);
        if (PQsendPrepare(s.pg, name.c_str(), text.c_str(), lp.size(), lp.oids.data()) == 0)
            s.fail("cannot send the statement");
        g.settle([&] { return s.collect({deadline, timeout, opts_.cancel_grace}); });
        it = s.statements.emplace(std::move(key), std::move(name)).first;
    }
    const int sent =
        it != s.statements.end()
            ? PQsendQueryPrepared(s.pg, it->second.c_str(), lp.size(), lp.values.data(),
                                  lp.lengths.data(), lp.formats.data(), 0)
            : PQsendQueryParams(s.pg, text.c_str(), lp.size(), lp.oids.data(), lp.values.data(),
                                lp.lengths.data(), lp.formats.data(), 0);
    if (sent == 0) s.fail("cannot send the statement");
    result r = g.settle([&] { return s.collect({deadline, timeout, opts_.cancel_grace}); });
    g.done = true;
    return r;
}

std::vector<result> connection::run_pipeline(std::chrono::nanoseconds timeout,
                                             std::span<const statement> sts) {
    check_call(ok(), timeout);
    if (sts.empty()) return {};
    const auto t0 = clock_type::now();
    state& s = *s_;
    in_flight g{s.broken};
    auto report = [&](std::string_view sqlstate) {
        if (opts_.on_statement) opts_.on_statement(clock_type::now() - t0, sqlstate);
    };
    try {
        auto out = g.settle([&] {
            if (PQenterPipelineMode(s.pg) == 0) s.fail("cannot enter pipeline mode");
            for (const statement& st : sts) {
                const libpq_params lp(st.ps_);
                if (PQsendQueryParams(s.pg, st.sql_.c_str(), lp.size(), lp.oids.data(),
                                      lp.values.data(), lp.lengths.data(), lp.formats.data(),
                                      0) == 0)
                    s.fail("cannot send a pipelined statement");
            }
            if (PQpipelineSync(s.pg) == 0) s.fail("cannot end the pipeline");
            return s.collect_pipeline(sts.size(), {t0 + timeout, timeout, opts_.cancel_grace});
        });
        g.done = true;
        report("");
        return out;
    } catch (const error& e) {
        report(e.sqlstate());
        throw;
    }
}

transaction connection::begin() {
    execute("BEGIN");
    return transaction(*this);
}

connection& transaction::conn() const {
    if (c_ == nullptr) throw std::logic_error("smarm::postgres::transaction: already ended");
    return *c_;
}

void transaction::commit() {
    connection& c = conn();
    c_ = nullptr;
    const bool failed = PQtransactionStatus(c.s_->pg) == PQTRANS_INERROR;
    c.execute("COMMIT");
    if (failed)
        throw error("postgres: the transaction was rolled back: a statement in it failed", "25P02");
}

void transaction::rollback() {
    connection& c = conn();
    c_ = nullptr;
    c.execute("ROLLBACK");
}

transaction::~transaction() {
    if (c_ == nullptr) return;
    connection& c = *std::exchange(c_, nullptr);
    if (!c.ok() || !c.in_transaction()) return;
    try {
        c.execute(within{c.opts_.cancel_grace}, "ROLLBACK");
    } catch (...) {
        // Could not roll back (a stop, a timeout, a broken socket): closing
        // the connection makes the server roll back.
        c.s_->broken = true;
    }
    if (c.in_transaction()) {
        PQfinish(c.s_->pg);
        c.s_->pg = nullptr;
        c.s_->broken = true;
    }
}

}  // namespace smarm::postgres
