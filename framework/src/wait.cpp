// The wait protocol's runtime half (detail/wait.hpp, detail/reply_cell.hpp):
// the entry points the blocking primitives in headers call. The park itself
// is fiber.cpp; the timer hooks are timer_service.cpp.

#include <smarm/detail/reply_cell.hpp>
#include <smarm/detail/wait.hpp>

#include <stdexcept>

#include "observe.hpp"
#include "runtime_impl.hpp"

namespace smarm::detail {

using namespace smarm::internal;

pid current_pid(const char* call) {
    auto [s, sl] = actor_or_throw(call);
    return pid{sl->index, s->current_gen};
}

pid current_pid_or_invalid() noexcept {
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr) return pid{};
    return pid{s->current->index, s->current_gen};
}

reply_cell_ref current_reply_cell(const char* call) {
    auto [s, sl] = actor_or_throw(call);
    return {&sl->reply, pid{sl->index, s->current_gen}};
}

std::uint32_t begin_wait() noexcept {
    return current_scheduler()->current->word.begin_wait();
}

wait_token open_wait(const char* call) {
    auto [s, sl] = actor_or_throw(call);
    return {pid{sl->index, s->current_gen}, sl->word.begin_wait()};
}

void unpark_at(pid p, std::uint32_t epoch) noexcept {
    if (scheduler* s = current_scheduler()) {
        s->rt->unpark_at(p, epoch, s);
    } else if (runtime_impl* rt = active_runtime()) {
        rt->unpark_at(p, epoch, nullptr);
    }
}

void retire_wait() noexcept {
    current_scheduler()->current->word.retire_wait();
}

bool wait_is_open(pid p, std::uint32_t epoch) noexcept {
    runtime_impl* rt = active_runtime();
    if (rt == nullptr) return false;
    slot* sl = rt->slots().at(p.index);
    if (sl == nullptr) return false;
    std::uint64_t w = sl->word.load();
    auto st = state_word::state_of(w);
    return state_word::gen_of(w) == p.generation &&
           state_word::epoch_of(w) == (epoch & state_word::epoch_mask) &&
           (st == actor_state::parked || st == actor_state::running ||
            st == actor_state::running_notified);
}

void unpark_then_observe(pid p, std::uint32_t epoch) {
    scheduler* s = entry_scheduler();  // read once, before the possible yield
    if (s == nullptr) {
        if (p.valid()) unpark_at(p, epoch);  // a sender outside the runtime
        return;
    }
    if (p.valid()) s->rt->unpark_at(p, epoch, s);
    observe_on(s);
}

wait_token observe_and_open(const char* call) {
    scheduler* s = entry_scheduler();  // after a yield, observe_on returns the new one
    if (s == nullptr || s->current == nullptr) actor_or_throw(call);  // throws
    s = observe_on(s);  // it may have yielded and moved us
    slot& sl = *s->current;
    return {pid{sl.index, s->current_gen}, sl.word.begin_wait(), &sl.messages};
}

void note_message_received() noexcept {
    scheduler* s = current_scheduler();
    if (s != nullptr && s->current != nullptr) bump(s->current->messages);
}

const char* to_string(wait_reason r) noexcept {
    switch (r) {
        case wait_reason::channel:
            return "channel";
        case wait_reason::call:
            return "call reply";
        case wait_reason::io_read:
            return "io read";
        case wait_reason::io_write:
            return "io write";
        case wait_reason::timer:
            return "timer";
        case wait_reason::mutex:
            return "mutex";
        case wait_reason::join:
            return "join";
        case wait_reason::select:
            return "select";
        case wait_reason::blocking:
            return "blocking pool";
        case wait_reason::signal:
            return "signal";
        case wait_reason::other:
            break;
    }
    return "other";
}

}  // namespace smarm::detail
