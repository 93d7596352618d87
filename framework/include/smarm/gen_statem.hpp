#pragma once
// smarm::statem — gen_statem: a state machine actor, OTP style.
//
// A machine reacts to events one at a time. An event is one alternative of
// the machine's event variant: the user's casts (plain structs), calls
// (structs deriving from call_event<Reply>, whose reply handle rides inside
// the event), and the events the runtime generates:
//
//   state_timeout     the state timeout fired (ctx::arm_state_timeout)
//   timeout{name}     a named timeout fired (ctx::arm_timeout)
//   info<I>           an out-of-band message (send_info)
//
// Two ways to write a machine.
//
// 1. The table form: states are types, and one overloaded function object
//    (statem::table{lambdas...}) holds a row per (state, event) pair:
//
//        struct open {}; struct closed {};
//        struct push {}; struct pull {};
//        struct is_open : statem::call_event<bool> {};
//        using state = std::variant<open, closed>;
//        using event = std::variant<push, pull, is_open, statem::state_timeout>;
//        using result = statem::result<state>;
//        using cx = statem::ctx<event>;
//        auto rows = statem::table{
//            [](open&, push&, data& d, cx&) -> result { ++d.pushes; return closed{}; },
//            [](closed&, pull&, data&, cx&) -> result { return open{}; },
//            [](auto& s, is_open& e, data&, cx&) -> result {
//                e.reply(std::is_same_v<decltype(s), open&>); return statem::stay; },
//            [](open&, statem::enter, data&, cx& c) { c.arm_state_timeout(5ms); },
//            [](open&, statem::state_timeout&, data&, cx&) -> result { return closed{}; },
//            [](auto&, auto&, data&, cx&) -> result { return statem::unhandled; },
//        };
//        auto door = statem::start_table<state, event>(closed{}, data{}, rows);
//        statem::cast(door, pull{});
//        auto r = statem::call<is_open>(door, 1s);      // r.value == true
//
//    The table is checked when it is instantiated: a (state, event) pair no
//    row accepts (or that two rows accept equally well) fails to compile,
//    naming the pair. Overload resolution is the precedence rule: an exact
//    row beats a generic (auto&) one, so a generic row is the explicit
//    "everything else" arm. info<I> events need no row (dropped by default).
//    Rows taking `statem::enter` are optional; they run on entering a state
//    (including the initial one).
//
// 2. By hand: any type with `using event_type = std::variant<...>;` and
//        statem::step handle(event_type& ev, statem::ctx<event_type>& cx);
//        void on_enter(statem::ctx<event_type>& cx);    // optional
//    handle() updates the machine's own state and says what happened (see
//    step). start<M>(args...) runs it.
//
// Row results (statem::result<State>): a state value (a transition when it
// differs from the current one: another alternative, or an unequal value of
// an equality-comparable one; else a stay), `stay`, `postpone`, `unhandled`
// (the event is dropped) or `stop` (the machine ends normally).
//
// Semantics (what the loop guarantees)
// - A real transition cancels the pending state timeout, runs the new
//   state's enter, then replays every postponed event, oldest first, ahead of
//   any new input. A replayed event may postpone again (it waits for the
//   next transition). A stay changes none of this.
// - The state timeout is one per machine and armed again replaces it; arm it
//   in an enter row to give a state a quiet-time limit. Named timeouts
//   survive transitions; each name is armed, replaced and cancelled on its
//   own. A cancelled or replaced timeout never reaches the machine, even if
//   its timer had already fired. Timer fires are served before the inbox.
// - A postponed event is kept whole: a postponed call keeps its reply handle
//   and is answered by whichever later state handles it. A row that returns
//   `postpone` must not have moved from its event.
// - A call whose reply handle is dropped unanswered (an `unhandled` call, a
//   machine that ends or throws with calls queued or postponed) returns
//   call_error::server_down at once.
// - The machine ends when a row returns `stop`, when every ref is gone, when
//   it is stopped (request_stop), or when a handler throws (outcome panic).
//
// Thread safety: refs are values; use them from any actor.

#include <smarm/channel.hpp>
#include <smarm/detail/call.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>
#include <smarm/timer.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace smarm::statem {

// ---- events the runtime generates -----------------------------------------

/// The state timeout fired (armed with ctx::arm_state_timeout).
struct state_timeout {};

/// A named timeout fired (armed with ctx::arm_timeout).
struct timeout {
    std::string name;
};

/// An out-of-band message delivered by send_info.
template <class I>
struct info {
    I value;
};

/// Tag of the optional enter rows of a table (see the header comment).
struct enter {};

// ---- replies -----------------------------------------------------------------

/// The reply handle a call event carries (smarm::reply_to, shared with
/// gen_server). Answer once with `reply(value)`; dropping it unanswered
/// releases the caller with call_error::server_down.
template <class T>
using reply_to = smarm::reply_to<T>;

/// Base of a call event: `struct get : statem::call_event<int> { int key; };`
/// A row answers with `e.reply(value)`.
template <class T>
struct call_event {
    using reply_type = T;
    reply_to<T> reply;
};

// ---- what a handler did -------------------------------------------------------

/// What one handle() call did, as the loop needs to see it.
enum class step {
    stayed,        ///< handled (or dropped) without a state change
    transitioned,  ///< the state changed: reset state timeout, enter, replay postponed
    postponed,     ///< keep the event untouched until the next transition
    stop,          ///< end the machine normally
};

namespace detail {

template <class T, class V>
struct is_alternative : std::false_type {};
template <class T, class... A>
struct is_alternative<T, std::variant<A...>> : std::bool_constant<(std::is_same_v<T, A> || ...)> {};
template <class T, class V>
inline constexpr bool is_alternative_v = is_alternative<T, V>::value;

template <class T>
struct is_info : std::false_type {};
template <class I>
struct is_info<info<I>> : std::true_type {};

/// A timer fire on the machine's own channel; `local` identifies the arming
/// so a fire that a cancel or re-arm overtook is recognised as stale.
struct fire {
    std::uint64_t local = 0;
    bool state = false;
    std::string name;
};

template <class M>
class loop;

}  // namespace detail

// ---- the handler context ------------------------------------------------------

/// Handed to every handler: arms and cancels the machine's timeouts. Lives
/// on the machine actor's stack; never share it.
template <class Event>
class ctx {
  public:
    /// Fires `state_timeout` after `after`, unless the state changes first.
    /// Replaces a pending one.
    void arm_state_timeout(
        std::chrono::nanoseconds after) requires detail::is_alternative_v<state_timeout, Event> {
        cancel_state_timeout();
        state_ = armed{next_local_, send_after(after, fires_, detail::fire{next_local_, true, {}})};
        ++next_local_;
    }
    /// Cancels the pending state timeout: true when one was pending.
    bool cancel_state_timeout() noexcept {
        if (!state_) return false;
        cancel_timer(state_->timer);
        state_.reset();
        return true;
    }
    /// Fires `timeout{name}` after `after`, across state changes. Replaces a
    /// pending timeout of the same name.
    void arm_timeout(std::string_view name, std::chrono::nanoseconds after) requires
        detail::is_alternative_v<timeout, Event> {
        (void)cancel_timeout(name);
        auto id = send_after(after, fires_, detail::fire{next_local_, false, std::string(name)});
        named_.emplace(std::string(name), armed{next_local_, id});
        ++next_local_;
    }
    /// Cancels the named timeout: true when it was pending.
    bool cancel_timeout(std::string_view name) noexcept {
        auto it = named_.find(name);
        if (it == named_.end()) return false;
        cancel_timer(it->second.timer);
        named_.erase(it);
        return true;
    }
    /// Number of timeouts pending (state + named).
    std::size_t pending_timeouts() const noexcept { return named_.size() + (state_ ? 1 : 0); }

  private:
    template <class M>
    friend class detail::loop;

    struct armed {
        std::uint64_t local;
        timer_id timer;
    };

    explicit ctx(sender<detail::fire> fires) : fires_(std::move(fires)) {}

    /// The event a fire stands for, or nothing when it is stale.
    std::optional<Event> take(const detail::fire& f) {
        if (f.state) {
            if constexpr (detail::is_alternative_v<state_timeout, Event>) {
                if (state_ && state_->local == f.local) {
                    state_.reset();
                    return Event(state_timeout{});
                }
            }
            return std::nullopt;
        }
        if constexpr (detail::is_alternative_v<timeout, Event>) {
            auto it = named_.find(f.name);
            if (it != named_.end() && it->second.local == f.local) {
                named_.erase(it);
                return Event(timeout{f.name});
            }
        }
        return std::nullopt;
    }
    void cancel_all() noexcept {
        cancel_state_timeout();
        for (auto& [n, a] : named_)
            cancel_timer(a.timer);
        named_.clear();
    }

    sender<detail::fire> fires_;
    std::uint64_t next_local_ = 1;
    std::optional<armed> state_;
    std::map<std::string, armed, std::less<>> named_;
};

/// What a hand-written machine provides (see the header comment).
template <class M>
concept machine = requires(M& m, typename M::event_type& e, ctx<typename M::event_type>& c) {
    { m.handle(e, c) } -> std::same_as<step>;
};

namespace detail {

template <class M>
class loop {
  public:
    using event = typename M::event_type;

    /// Runs `m` on the calling actor until it stops or its inbox closes.
    static void run(M& m, receiver<event> inbox) {
        auto [ftx, frx] = channel<fire>();
        ctx<event> cx(std::move(ftx));
        struct disarm {
            ctx<event>& cx;
            ~disarm() { cx.cancel_all(); }
        } guard{cx};
        loop l{m, cx};
        l.enter();
        for (;;) {
            check();  // a machine fed a hot inbox stays preemptible and stoppable
            if (!l.replay_.empty()) {
                event ev = std::move(l.replay_.front());
                l.replay_.pop_front();
                if (!l.dispatch(ev)) return;
                continue;
            }
            if (auto f = frx.try_recv()) {
                if (auto ev = cx.take(*f.value))
                    if (!l.dispatch(*ev)) return;
                continue;
            }
            auto msg = inbox.try_recv();
            if (msg) {
                if (!l.dispatch(*msg.value)) return;
                continue;
            }
            if (msg.status == recv_status::closed) return;
            (void)select({frx, inbox});
        }
    }

  private:
    loop(M& m, ctx<event>& cx) : m_(m), cx_(cx) {}

    void enter() {
        if constexpr (requires { m_.on_enter(cx_); }) m_.on_enter(cx_);
    }

    /// Runs one event; false when the machine stops.
    bool dispatch(event& ev) {
        switch (m_.handle(ev, cx_)) {
            case step::stayed:
                return true;
            case step::postponed:
                postponed_.push_back(std::move(ev));
                return true;
            case step::transitioned:
                cx_.cancel_state_timeout();
                enter();
                // Everything postponed so far goes back in front of the
                // replay queue, oldest first.
                while (!postponed_.empty()) {
                    replay_.push_front(std::move(postponed_.back()));
                    postponed_.pop_back();
                }
                return true;
            case step::stop:
                return false;
        }
        return true;
    }

    M& m_;
    ctx<event>& cx_;
    std::deque<event> postponed_;  // waiting for the next transition
    std::deque<event> replay_;     // served before any new input
};

}  // namespace detail

/// Runs machine `m` on the calling actor, serving `inbox`, until it ends.
/// start() does this in a new actor.
template <machine M>
void serve(M& m, receiver<typename M::event_type> inbox) {
    detail::loop<M>::run(m, std::move(inbox));
}

// ---- addresses, start, cast, call ----------------------------------------------

/// The address of a running machine.
template <class M>
struct ref {
    pid id;
    sender<typename M::event_type> inbox;
};

/// Spawns `M(args...)` (constructed inside the new actor) and serves it.
template <machine M, class... Args>
ref<M> start(Args&&... args) {
    auto [tx, rx] = channel<typename M::event_type>();
    auto h = spawn([rx = std::move(rx), ... args = std::forward<Args>(args)]() mutable {
        M m(std::move(args)...);
        serve(m, std::move(rx));
    });
    ref<M> r{h.id(), std::move(tx)};
    h.detach();
    return r;
}

/// start(), then binds the inbox to `n` on the machine's behalf, so the name
/// resolves as soon as this returns. Throws std::runtime_error naming `n`
/// when a live actor already holds it (the new machine is stopped).
template <machine M, class... Args>
ref<M> start_named(name<typename M::event_type> n, Args&&... args) {
    auto r = start<M>(std::forward<Args>(args)...);
    smarm::detail::bind_started_server(r.id, n, r.inbox, "smarm::statem::start_named");
    return r;
}

/// Sends an event (any alternative of the event variant); false when the
/// machine is not running.
template <class M, class E>
bool cast(const ref<M>& r, E&& ev) {
    return r.inbox.send(typename M::event_type(std::forward<E>(ev))).ok();
}

/// Sends `info<I>{msg}`; false when the machine is not running.
template <class M, class I>
bool send_info(const ref<M>& r, I msg) {
    return r.inbox.send(typename M::event_type(info<I>{std::move(msg)})).ok();
}

namespace detail {
template <class E, class Env, class... Args>
call_result<typename E::reply_type> call_via(const sender<Env>& inbox,
                                             std::chrono::nanoseconds timeout, Args&&... args) {
    using reply = typename E::reply_type;
    static_assert(std::is_base_of_v<call_event<reply>, E>,
                  "a call event derives from smarm::statem::call_event<Reply>");
    return smarm::detail::call_with_reply<reply>(timeout, [&](reply_to<reply> to) {
        E ev{call_event<reply>{std::move(to)}, std::forward<Args>(args)...};
        return inbox.send(Env(std::move(ev))).ok();
    });
}
}  // namespace detail

/// Calls the machine with event `E{reply, args...}` and parks for the reply,
/// at most `timeout`.
template <class E, class M, class... Args>
call_result<typename E::reply_type> call(const ref<M>& r, std::chrono::nanoseconds timeout,
                                         Args&&... args) {
    return detail::call_via<E>(r.inbox, timeout, std::forward<Args>(args)...);
}

/// Calls the machine registered under `n` (resolved now).
template <class E, class Env, class... Args>
call_result<typename E::reply_type> call(name<Env> n, std::chrono::nanoseconds timeout,
                                         Args&&... args) {
    auto inbox = smarm::detail::resolve_inbox(n);
    if (!inbox) return {std::nullopt, call_error::server_down};
    return detail::call_via<E>(*inbox, timeout, std::forward<Args>(args)...);
}

// ---- the table form ------------------------------------------------------------

/// An overload set of rows: `statem::table{[](S&, E&, D&, ctx&) ..., ...}`.
template <class... Rows>
struct table : Rows... {
    using Rows::operator()...;
};
template <class... Rows>
table(Rows...) -> table<Rows...>;

struct stay_t {};
struct postpone_t {};
struct unhandled_t {};
struct stop_t {};
/// Row results other than a new state.
inline constexpr stay_t stay{};
inline constexpr postpone_t postpone{};
inline constexpr unhandled_t unhandled{};
inline constexpr stop_t stop{};

/// What a table row returns: a state value, stay, postpone, unhandled or stop.
template <class State>
class result {
  public:
    result(stay_t) noexcept : v_(stay_t{}) {}
    result(postpone_t) noexcept : v_(postpone_t{}) {}
    result(unhandled_t) noexcept : v_(unhandled_t{}) {}
    result(stop_t) noexcept : v_(stop_t{}) {}
    template <class S>
    requires detail::is_alternative_v<std::decay_t<S>, State> result(S&& s)
        : v_(State(std::forward<S>(s))) {}

    template <class F>
    decltype(auto) visit(F&& f) && {
        return std::visit(std::forward<F>(f), std::move(v_));
    }

  private:
    std::variant<stay_t, postpone_t, unhandled_t, stop_t, State> v_;
};

namespace detail {

template <class>
inline constexpr bool always_false = false;

/// Instantiated only for a (state, event) pair no row accepts: its template
/// arguments name the pair in the compiler's message.
template <class S, class E>
struct no_row_for {
    static_assert(always_false<S>,
                  "smarm::statem::table: no row accepts the (state, event) pair "
                  "no_row_for<State, Event>, or two rows accept it equally well. Add a row, "
                  "or a generic one such as [](State&, auto&, Data&, ctx&) -> result { return "
                  "statem::unhandled; }");
    static constexpr bool value = false;
};

template <class Table, class State, class Data, class Event, class S, class E>
constexpr bool has_row() {
    if constexpr (is_info<E>::value ||
                  std::is_invocable_r_v<result<State>, const Table&, S&, E&, Data&, ctx<Event>&>)
        return true;
    else
        return no_row_for<S, E>::value;
}

template <class Table, class State, class Data, class Event, class S, class... E>
constexpr bool state_rows(std::variant<E...>*) {
    return (has_row<Table, State, Data, Event, S, E>() && ...);
}

template <class Table, class State, class Data, class Event, class... S>
constexpr bool all_rows(std::variant<S...>*) {
    return (state_rows<Table, State, Data, Event, S>(static_cast<Event*>(nullptr)) && ...);
}

template <class T>
bool same_state(const T& a, const T& b) {
    if constexpr (std::equality_comparable<T>)
        return a == b;
    else
        return true;
}

}  // namespace detail

/// A machine made of a state variant, an event variant, user data and a
/// table of rows (see the header comment). Built by start_table().
template <class State, class Event, class Data, class Table>
class table_machine {
    static_assert(detail::all_rows<Table, State, Data, Event>(static_cast<State*>(nullptr)));

  public:
    using state_type = State;
    using event_type = Event;
    using data_type = Data;
    using context = ctx<Event>;

    table_machine(State initial, Data data, Table rows)
        : state_(std::move(initial)), data_(std::move(data)), rows_(std::move(rows)) {}

    void on_enter(context& cx) {
        std::visit(
            [&](auto& s) {
                if constexpr (std::is_invocable_v<const Table&, decltype(s), enter, Data&,
                                                  context&>)
                    rows_(s, enter{}, data_, cx);
            },
            state_);
    }

    step handle(Event& ev, context& cx) {
        result<State> r = std::visit(
            [&](auto& s, auto& e) -> result<State> {
                using S = std::remove_reference_t<decltype(s)>;
                using E = std::remove_reference_t<decltype(e)>;
                if constexpr (detail::is_info<E>::value &&
                              !std::is_invocable_v<const Table&, S&, E&, Data&, context&>)
                    return unhandled;
                else
                    return rows_(s, e, data_, cx);
            },
            state_, ev);
        return std::move(r).visit([&](auto&& v) -> step {
            using V = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<V, stay_t> || std::is_same_v<V, unhandled_t>)
                return step::stayed;
            else if constexpr (std::is_same_v<V, postpone_t>)
                return step::postponed;
            else if constexpr (std::is_same_v<V, stop_t>)
                return step::stop;
            else
                return change_to(std::move(v));
        });
    }

    const State& state() const noexcept { return state_; }
    const Data& data() const noexcept { return data_; }

  private:
    step change_to(State&& next) {
        bool same = next.index() == state_.index() &&
                    std::visit(
                        [&](const auto& n) {
                            using T = std::decay_t<decltype(n)>;
                            return detail::same_state(n, std::get<T>(state_));
                        },
                        next);
        state_ = std::move(next);
        return same ? step::stayed : step::transitioned;
    }

    State state_;
    Data data_;
    Table rows_;
};

/// Starts a table machine in `initial` with `data`:
/// `start_table<state_variant, event_variant>(initial, data, rows)`.
template <class State, class Event, class Data, class Table>
ref<table_machine<State, Event, Data, Table>> start_table(State initial, Data data, Table rows) {
    return start<table_machine<State, Event, Data, Table>>(std::move(initial), std::move(data),
                                                           std::move(rows));
}

}  // namespace smarm::statem
