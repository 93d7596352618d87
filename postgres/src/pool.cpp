// The pool's actor (design at the top of pool.hpp).
//
// Invariants, all kept by the pool's actor alone (the stats atomics only
// mirror them for readers; relaxed: a reader wants a recent value, not an
// ordering with anything else):
//   open + connecting <= size            (never more connections than asked)
//   open == idle.size() + leased          (a leased connection comes back
//                                          as `returned`, exactly once: the
//                                          lease's destructor, or a failed
//                                          reply destroying the lease)
//   a waiter is answered once: a lease, an empty lease carrying the connect
//   error, or dropped (its caller sees server_down or its own timeout).

#include <smarm/gen_server.hpp>
#include <smarm/postgres/pool.hpp>
#include <smarm/runtime.hpp>

#include <deque>
#include <mutex>
#include <variant>
#include <vector>

#include "text.hpp"

namespace smarm::postgres {

namespace {
using clock_type = std::chrono::steady_clock;

using internal::ms_text;

struct checkout_req {
    clock_type::time_point deadline;
};
struct returned {
    connection c;
};
struct connected {
    connection c;
};
struct failed {
    std::string why;
};
struct warm {};
struct shutdown {};
using pool_msg = std::variant<returned, connected, failed, warm, shutdown>;

constexpr std::uint64_t tag_retry = 1, tag_idle_check = 2;

using server_base = gen_server<checkout_req, lease, pool_msg>;
}  // namespace

namespace detail {
struct pool_core {
    pool_options opts;
    sender<server_base::envelope> inbox;  // the pool's actor
    pid actor;
    std::atomic<std::uint64_t> open{0}, in_use{0}, waiting{0}, connecting{0}, checkouts{0},
        waited{0}, timeouts{0}, connect_failures{0}, discarded{0};
    std::atomic<bool> healthy{false};
    mutable std::mutex m;
    std::string last_error;  // guarded by m

    bool send(pool_msg m) {
        return inbox.send(server_base::envelope(std::in_place_index<1>, std::move(m))).ok();
    }

    static lease make_lease(connection c, std::shared_ptr<pool_core> home) {
        lease l;
        l.c_.emplace(std::move(c));
        l.home_ = std::move(home);
        return l;
    }
    static lease make_failure(std::string why) {
        lease l;
        l.error_ = std::move(why);
        return l;
    }
    static const std::string& failure_of(const lease& l) { return l.error_; }

    // Hands a connection back to the pool's actor; closes it when the pool
    // is gone.
    void give_back(connection&& c) noexcept {
        try {
            (void)send(returned{std::move(c)});
        } catch (...) {
            // Out of memory queueing the message: the connection closes and
            // the pool's count is repaired by the next idle check.
        }
    }
};
}  // namespace detail

namespace {

class pool_server final : public server_base {
  public:
    explicit pool_server(std::shared_ptr<detail::pool_core> core)
        : core_(std::move(core)), backoff_(core_->opts.backoff_min) {}

    lease handle_call(checkout_req req) override {
        while (!idle_.empty()) {
            connection c = std::move(idle_.back());
            idle_.pop_back();
            if (c.alive()) return hand_out(std::move(c), false);
            discard();
        }
        if (in_backoff_ && open_ == 0) {
            // The server is unreachable and no connection can come back:
            // say so now rather than at the deadline (the retry timer runs
            // meanwhile).
            core_->timeouts.fetch_add(1, std::memory_order_relaxed);
            return failure();
        }
        waiters_.push_back({req.deadline, defer_reply()});
        publish();
        maybe_connect();
        return lease();
    }

    void handle_cast(pool_msg m) override {
        if (auto* r = std::get_if<returned>(&m)) {
            core_->in_use.fetch_sub(1, std::memory_order_relaxed);
            if (!r->c.alive() || r->c.in_transaction()) {
                discard();
                maybe_connect();
            } else {
                give(std::move(r->c));
            }
        } else if (auto* c = std::get_if<connected>(&m)) {
            --connecting_;
            ++open_;
            in_backoff_ = false;
            backoff_ = core_->opts.backoff_min;
            core_->healthy.store(true, std::memory_order_relaxed);
            give(std::move(c->c));
            maybe_connect();
        } else if (auto* f = std::get_if<failed>(&m)) {
            --connecting_;
            core_->connect_failures.fetch_add(1, std::memory_order_relaxed);
            core_->healthy.store(false, std::memory_order_relaxed);
            {
                std::lock_guard<std::mutex> g(core_->m);
                core_->last_error = f->why;
            }
            // With no connection open none can come back: everyone waiting
            // learns now. (With some open, a refused connect, e.g. the
            // server's connection limit, leaves the waiters to the returns.)
            // The next attempt waits out the backoff.
            while (open_ == 0 && !waiters_.empty()) {
                core_->timeouts.fetch_add(1, std::memory_order_relaxed);
                (void)waiters_.front().reply.send(failure());
                waiters_.pop_front();
            }
            if (!in_backoff_) {
                in_backoff_ = true;
                arm_after(backoff_, tag_retry);
                backoff_ = std::min(backoff_ * 2, core_->opts.backoff_max);
            }
        } else if (std::holds_alternative<warm>(m)) {
            // The first message: core_->inbox is set by now (it was before
            // this was sent), so timers and connectors may use it.
            arm_every(core_->opts.idle_check, tag_idle_check);
            if (open_ + connecting_ == 0) connect();
        } else {
            stop();
        }
        publish();
    }

    void handle_timer(std::uint64_t tag) override {
        if (tag == tag_retry) {
            in_backoff_ = false;
            maybe_connect();
        } else if (tag == tag_idle_check) {
            std::vector<connection> keep;
            for (auto& c : idle_)
                if (c.alive())
                    keep.push_back(std::move(c));
                else
                    discard();
            idle_ = std::move(keep);
            drop_expired();
            if (open_ == 0 && connecting_ == 0 && !in_backoff_) connect();  // a probe
        }
        publish();
    }

    void terminate(exit_kind) override {
        idle_.clear();
        open_ = 0;
        publish();
    }

  private:
    struct waiter {
        clock_type::time_point deadline;
        reply_to<lease> reply;
    };

    lease hand_out(connection c, bool queued) {
        lease l = detail::pool_core::make_lease(std::move(c), core_);
        core_->in_use.fetch_add(1, std::memory_order_relaxed);
        core_->checkouts.fetch_add(1, std::memory_order_relaxed);
        if (queued) core_->waited.fetch_add(1, std::memory_order_relaxed);
        return l;
    }

    lease failure() const {
        std::lock_guard<std::mutex> g(core_->m);
        return detail::pool_core::make_failure(
            core_->last_error.empty() ? "postgres: the server is unreachable" : core_->last_error);
    }

    // A free connection: to the first waiter still waiting, else idle.
    void give(connection c) {
        drop_expired();
        if (waiters_.empty()) {
            idle_.push_back(std::move(c));
            return;
        }
        waiter w = std::move(waiters_.front());
        waiters_.pop_front();
        // If the caller left meanwhile, the lease dies in send() and its
        // destructor brings the connection back as `returned`.
        (void)w.reply.send(hand_out(std::move(c), true));
    }

    // Waiters whose deadline passed gave up on their side already.
    void drop_expired() {
        const auto now = clock_type::now();
        while (!waiters_.empty() && waiters_.front().deadline <= now)
            waiters_.pop_front();
    }

    void discard() {
        --open_;
        core_->discarded.fetch_add(1, std::memory_order_relaxed);
    }

    void maybe_connect() {
        drop_expired();
        while (!in_backoff_ && waiters_.size() > connecting_ &&
               open_ + connecting_ < core_->opts.size)
            connect();
    }

    void connect() {
        ++connecting_;
        auto core = core_;
        auto h = smarm::spawn([core] {
            try {
                auto c = connection::connect(core->opts.connection);
                (void)core->send(connected{std::move(c)});
            } catch (const std::exception& e) {
                (void)core->send(failed{e.what()});
            }
        });
        h.detach();
    }

    void publish() {
        core_->open.store(open_, std::memory_order_relaxed);
        core_->connecting.store(connecting_, std::memory_order_relaxed);
        core_->waiting.store(waiters_.size(), std::memory_order_relaxed);
    }

    std::shared_ptr<detail::pool_core> core_;
    std::vector<connection> idle_;  // the most recently used last (LIFO: warm caches)
    std::deque<waiter> waiters_;
    std::size_t open_ = 0, connecting_ = 0;
    bool in_backoff_ = false;
    std::chrono::nanoseconds backoff_;
};

}  // namespace

lease& lease::operator=(lease&& o) noexcept {
    if (this != &o) {
        give_back();
        c_ = std::move(o.c_);
        o.c_.reset();
        home_ = std::move(o.home_);
        error_ = std::move(o.error_);
    }
    return *this;
}

lease::~lease() {
    give_back();
}

void lease::give_back() noexcept {
    if (c_ && home_) home_->give_back(std::move(*c_));
    c_.reset();
    home_.reset();
}

pool::pool(pool_options opts) {
    if (opts.size == 0 || opts.size > 10000)
        throw std::invalid_argument("smarm::postgres::pool_options.size = " +
                                    std::to_string(opts.size) + ": must be 1..10000");
    if (opts.checkout_timeout <= std::chrono::nanoseconds::zero() ||
        opts.idle_check <= std::chrono::nanoseconds::zero() ||
        opts.backoff_min <= std::chrono::nanoseconds::zero() || opts.backoff_max < opts.backoff_min)
        throw std::invalid_argument(
            "smarm::postgres::pool_options: checkout_timeout, idle_check and backoff_min must be "
            "> 0 and backoff_max >= backoff_min");
    if (opts.connection.conninfo.empty())
        throw std::invalid_argument("smarm::postgres::pool_options.connection.conninfo is empty");
    core_ = std::make_shared<detail::pool_core>();
    core_->opts = std::move(opts);
    auto ref = smarm::start<pool_server>(core_);
    core_->actor = ref.id;
    core_->inbox = std::move(ref.inbox);
    (void)core_->send(warm{});
}

pool::pool(pool&&) noexcept = default;

pool& pool::operator=(pool&& o) noexcept {
    if (this != &o) {
        if (core_) (void)core_->send(shutdown{});
        core_ = std::move(o.core_);
    }
    return *this;
}

pool::~pool() {
    if (core_) (void)core_->send(shutdown{});
}

lease pool::checkout() {
    return checkout(core_->opts.checkout_timeout);
}

lease pool::checkout(std::chrono::nanoseconds timeout) {
    if (!core_) throw std::logic_error("smarm::postgres::pool: moved from");
    if (timeout <= std::chrono::nanoseconds::zero())
        throw std::invalid_argument("smarm::postgres::pool::checkout: the timeout must be > 0");
    const auto t0 = clock_type::now();
    auto r =
        smarm::detail::call_via<pool_server>(core_->inbox, checkout_req{t0 + timeout}, timeout);
    if (r.value && *r.value) {
        if (core_->opts.on_checkout) core_->opts.on_checkout(clock_type::now() - t0);
        return std::move(*r.value);
    }
    if (r.value)
        throw connection_error(
            "postgres: no connection: " + detail::pool_core::failure_of(*r.value), "08001");
    core_->timeouts.fetch_add(1, std::memory_order_relaxed);
    const pool_stats st = stats();
    // A waiter whose deadline passed may be dropped by the pool's actor a
    // moment before the caller's own timer: that is a timeout too.
    if (r.error == call_error::server_down && clock_type::now() < t0 + timeout)
        throw pool_timeout("postgres: the pool is stopped", "08003");
    throw pool_timeout("postgres: no connection free within " + ms_text(timeout) + " (pool of " +
                           std::to_string(st.size) + ": " + std::to_string(st.in_use) +
                           " in use, " + std::to_string(st.waiting) + " waiting)",
                       "53300");
}

smarm::pid pool::actor() const noexcept {
    return core_ ? core_->actor : smarm::pid{};
}

pool_stats pool::stats() const {
    pool_stats s;
    if (!core_) return s;
    const auto& c = *core_;
    s.size = c.opts.size;
    s.open = c.open.load(std::memory_order_relaxed);
    s.in_use = c.in_use.load(std::memory_order_relaxed);
    s.waiting = c.waiting.load(std::memory_order_relaxed);
    s.connecting = c.connecting.load(std::memory_order_relaxed);
    s.checkouts = c.checkouts.load(std::memory_order_relaxed);
    s.waited = c.waited.load(std::memory_order_relaxed);
    s.timeouts = c.timeouts.load(std::memory_order_relaxed);
    s.connect_failures = c.connect_failures.load(std::memory_order_relaxed);
    s.discarded = c.discarded.load(std::memory_order_relaxed);
    s.healthy = c.healthy.load(std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(c.m);
    s.last_error = c.last_error;
    return s;
}

}  // namespace smarm::postgres
