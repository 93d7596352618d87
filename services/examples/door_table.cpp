// The door machine in table form: states are types, and one row per
// (state, event) pair says what happens. Leave a pair out and the build
// fails naming it. The same machine by hand: door_handwritten.cpp.

#include "door.hpp"

using namespace door_example;

namespace {

struct open {};
struct closed {};
struct locked {};
using state = std::variant<open, closed, locked>;
using result = statem::result<state>;
using cx = statem::ctx<event>;

door tag(const open&) {
    return door::open;
}
door tag(const closed&) {
    return door::closed;
}
door tag(const locked&) {
    return door::locked;
}

auto rows = statem::table{
    // Entering any state counts; an open door arms its auto-close.
    [](auto&, statem::enter, data& d, cx&) { ++d.enters; },
    [](open&, statem::enter, data& d, cx& c) {
        ++d.enters;
        c.arm_state_timeout(auto_close);
    },

    // open
    [](open&, push&, data& d, cx&) -> result {
        ++d.pushes;
        return closed{};
    },
    [](open&, statem::state_timeout&, data&, cx&) -> result { return closed{}; },

    // closed
    [](closed&, pull&, data&, cx&) -> result { return open{}; },
    [](closed&, lock&, data&, cx&) -> result { return locked{}; },

    // reachable doors count knocks; a locked one defers them
    [](open&, knock&, data& d, cx&) -> result {
        ++d.knocks;
        return statem::stay;
    },
    [](closed&, knock&, data& d, cx&) -> result {
        ++d.knocks;
        return statem::stay;
    },
    [](locked&, knock&, data&, cx&) -> result { return statem::postpone; },

    // locked
    [](locked&, unlock& u, data&, cx&) -> result {
        if (u.key == code) return closed{};
        return statem::stay;
    },

    // calls, in every state
    [](auto& s, get_state& c, data&, cx&) -> result {
        c.reply(tag(s));
        return statem::stay;
    },
    [](auto&, get_enters& c, data& d, cx&) -> result {
        c.reply(d.enters);
        return statem::stay;
    },
    [](auto&, get_pushes& c, data& d, cx&) -> result {
        c.reply(d.pushes);
        return statem::stay;
    },
    [](auto&, get_knocks& c, data& d, cx&) -> result {
        c.reply(d.knocks);
        return statem::stay;
    },

    // Every other cast is refused, state by state. Listing the refusals
    // (instead of one catch-all) keeps the table total by construction.
    [](open&, pull&, data&, cx&) -> result { return statem::unhandled; },
    [](open&, lock&, data&, cx&) -> result { return statem::unhandled; },
    [](open&, unlock&, data&, cx&) -> result { return statem::unhandled; },
    [](closed&, push&, data&, cx&) -> result { return statem::unhandled; },
    [](closed&, unlock&, data&, cx&) -> result { return statem::unhandled; },
    [](locked&, push&, data&, cx&) -> result { return statem::unhandled; },
    [](locked&, pull&, data&, cx&) -> result { return statem::unhandled; },
    [](locked&, lock&, data&, cx&) -> result { return statem::unhandled; },
    // Only an open door arms a state timeout.
    [](closed&, statem::state_timeout&, data&, cx&) -> result { return statem::unhandled; },
    [](locked&, statem::state_timeout&, data&, cx&) -> result { return statem::unhandled; },
    // info<std::string> has no row: dropped by default.
};

}  // namespace

int main() {
    int rc = 1;
    smarm::run([&] {
        auto d = statem::start_table<state, event>(closed{}, data{}, rows);
        rc = scenario(d);
    });
    return rc;
}
