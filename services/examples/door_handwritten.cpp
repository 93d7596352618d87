// The door machine written by hand: what door_table.cpp's table does,
// spelled out. The machine keeps its state in an enum and says, per event,
// what each state does. The compiler still checks totality: std::visit
// needs an on() for every event type, and -Wswitch (an error under
// -Werror) flags a state missing from any switch.

#include "door.hpp"

#include <optional>

using namespace door_example;

namespace {

class door_machine {
  public:
    using event_type = event;
    using context = statem::ctx<event>;

    explicit door_machine(door initial) : state_(initial) {}

    void on_enter(context& cx) {
        ++data_.enters;
        if (state_ == door::open) cx.arm_state_timeout(auto_close);
    }

    statem::step handle(event& ev, context&) {
        // A knock at a locked door waits, untouched, for the next transition.
        if (state_ == door::locked && std::holds_alternative<knock>(ev))
            return statem::step::postponed;
        std::optional<door> next = std::visit([&](auto& e) { return on(e); }, ev);
        if (!next || *next == state_) return statem::step::stayed;
        state_ = *next;
        return statem::step::transitioned;
    }

  private:
    // Each on() returns the next state, or nothing when the event is
    // refused in the current state.
    std::optional<door> on(push&) {
        switch (state_) {
            case door::open:
                ++data_.pushes;
                return door::closed;
            case door::closed:
            case door::locked:
                return std::nullopt;
        }
        return std::nullopt;
    }
    std::optional<door> on(pull&) {
        switch (state_) {
            case door::closed:
                return door::open;
            case door::open:
            case door::locked:
                return std::nullopt;
        }
        return std::nullopt;
    }
    std::optional<door> on(lock&) {
        switch (state_) {
            case door::closed:
                return door::locked;
            case door::open:
            case door::locked:
                return std::nullopt;
        }
        return std::nullopt;
    }
    std::optional<door> on(unlock& u) {
        switch (state_) {
            case door::locked:
                return u.key == code ? door::closed : door::locked;
            case door::open:
            case door::closed:
                return std::nullopt;
        }
        return std::nullopt;
    }
    std::optional<door> on(knock&) {
        switch (state_) {
            case door::open:
            case door::closed:
                ++data_.knocks;
                return state_;
            case door::locked:  // postponed in handle(); never reaches here
                return std::nullopt;
        }
        return std::nullopt;
    }
    std::optional<door> on(statem::state_timeout&) {
        switch (state_) {
            case door::open:
                return door::closed;
            case door::closed:
            case door::locked:
                return std::nullopt;
        }
        return std::nullopt;
    }
    std::optional<door> on(get_state& c) {
        c.reply(state_);
        return state_;
    }
    std::optional<door> on(get_enters& c) {
        c.reply(data_.enters);
        return state_;
    }
    std::optional<door> on(get_pushes& c) {
        c.reply(data_.pushes);
        return state_;
    }
    std::optional<door> on(get_knocks& c) {
        c.reply(data_.knocks);
        return state_;
    }
    std::optional<door> on(statem::info<std::string>&) { return std::nullopt; }

    door state_;
    data data_;
};

}  // namespace

int main() {
    int rc = 1;
    smarm::run([&] {
        auto d = statem::start<door_machine>(door::closed);
        rc = scenario(d);
    });
    return rc;
}
