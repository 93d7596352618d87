// select / select_timeout over select_source arms.
//
// One wait epoch per attempt: every not-ready arm registers (self, epoch);
// the first ready arm in priority order ends the attempt with retire_wait(),
// which makes all registrations of that epoch inert. Sources that keep
// kernel state (fd arms) are told to unregister eagerly.

#include <smarm/select.hpp>

#include <smarm/detail/wait.hpp>

#include <span>
#include <stdexcept>
#include <vector>

namespace smarm {

namespace {

std::optional<std::size_t> select_impl(std::span<const select_arm> arms,
                                       std::optional<detail::clock::time_point> deadline) {
    if (arms.size() == 0) throw std::logic_error("smarm::select: no arms");
    detail::observe();
    pid me = detail::current_pid("smarm::select");
    std::uint64_t timer = 0;
    struct cleanup {
        std::span<const select_arm> arms;
        pid me;
        std::uint32_t epoch = 0;
        std::size_t registered = 0;
        std::uint64_t* timer;
        void drop() noexcept {
            std::size_t i = 0;
            for (auto& a : arms) {
                if (i++ >= registered) break;
                a.source()->unregister(me, epoch);
            }
            registered = 0;
            if (*timer) detail::disarm_timer(std::exchange(*timer, 0));
        }
        ~cleanup() { drop(); }
    } c{arms, me, 0, 0, &timer};

    for (;;) {
        c.epoch = detail::begin_wait();
        std::size_t i = 0;
        for (auto& a : arms) {
            if (a.source()->ready_or_register(me, c.epoch)) {
                c.registered = i;
                detail::retire_wait();
                c.drop();
                detail::throw_if_stopped();
                return i;
            }
            ++i;
        }
        c.registered = arms.size();
        if (deadline && detail::clock::now() >= *deadline) {
            detail::retire_wait();
            return std::nullopt;
        }
        if (deadline) timer = detail::arm_wake_timer(*deadline, me, c.epoch);
        detail::park(detail::wait_reason::select);
        c.drop();
    }
}

}  // namespace

std::size_t select(std::initializer_list<select_arm> arms) {
    return *select_impl({arms.begin(), arms.size()}, std::nullopt);
}

std::optional<std::size_t> select_timeout(std::initializer_list<select_arm> arms,
                                          std::chrono::nanoseconds timeout) {
    return select_impl({arms.begin(), arms.size()}, detail::clock::now() + timeout);
}

std::optional<std::size_t> select_until(
    std::span<const select_arm> arms,
    std::optional<std::chrono::steady_clock::time_point> deadline) {
    return select_impl(arms, deadline);
}

}  // namespace smarm
