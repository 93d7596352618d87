#pragma once
// The door machine shared by door_table.cpp (table form) and
// door_handwritten.cpp (the same machine written by hand): its events, its
// data, and the scenario both examples run.
//
// A door is open, closed or locked. Push closes an open door, pull opens a
// closed one, lock / unlock(key) lock and unlock a closed one. A knock is
// counted when the door is reachable; a knock at a locked door is postponed
// and counted once the door is unlocked. An open door closes by itself after
// a quiet window (a state timeout). Info messages are dropped.

#include <smarm/gen_statem.hpp>
#include <smarm/runtime.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <variant>

namespace door_example {

using namespace std::chrono_literals;
namespace statem = smarm::statem;

enum class door { open, closed, locked };

inline const char* to_string(door d) {
    switch (d) {
        case door::open:
            return "open";
        case door::closed:
            return "closed";
        case door::locked:
            return "locked";
    }
    return "?";
}

// Casts.
struct push {};
struct pull {};
struct lock {};
struct unlock {
    unsigned key;
};
struct knock {};
// Calls.
struct get_state : statem::call_event<door> {};
struct get_enters : statem::call_event<unsigned> {};
struct get_pushes : statem::call_event<unsigned> {};
struct get_knocks : statem::call_event<unsigned> {};

using event = std::variant<push, pull, lock, unlock, knock, get_state, get_enters, get_pushes,
                           get_knocks, statem::state_timeout, statem::info<std::string>>;

struct data {
    unsigned enters = 0;  // state entries, the initial one included
    unsigned pushes = 0;  // times a push closed the door
    unsigned knocks = 0;  // knocks answered
};

constexpr unsigned code = 1234;
constexpr auto auto_close = 5ms;

/// Drives a door that starts closed; returns 0 when every check holds.
template <class Ref>
int scenario(const Ref& d) {
    statem::cast(d, lock{});                       // closed -> locked
    statem::cast(d, knock{});                      // locked: postponed
    statem::cast(d, push{});                       // locked: unhandled
    statem::cast(d, unlock{0});                    // wrong key: stays locked, knock still waits
    statem::cast(d, unlock{code});                 // locked -> closed; the knock replays here
    statem::cast(d, push{});                       // closed: unhandled
    statem::cast(d, pull{});                       // closed -> open, arms the auto-close
    statem::send_info(d, std::string("ignored"));  // dropped
    // The state timeout closes the door with no further input.
    smarm::sleep(40ms);

    auto st = statem::call<get_state>(d, 5s);
    auto enters = statem::call<get_enters>(d, 5s);
    auto pushes = statem::call<get_pushes>(d, 5s);
    auto knocks = statem::call<get_knocks>(d, 5s);
    if (!st || !enters || !pushes || !knocks) {
        std::printf("a call failed\n");
        return 1;
    }
    std::printf("state=%s enters=%u pushes=%u knocks=%u\n", to_string(*st.value), *enters.value,
                *pushes.value, *knocks.value);
    // closed (start) + locked + closed + open + closed (auto-close)
    bool ok =
        *st.value == door::closed && *enters.value == 5 && *pushes.value == 0 && *knocks.value == 1;
    std::printf("%s\n", ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}

}  // namespace door_example
