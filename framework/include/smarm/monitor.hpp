#pragma once
// Monitors and links: learning that another actor ended (Erlang semantics).
//
// Monitor: monitor(p) delivers exactly one smarm::down when p ends (its
// outcome), or at once with down_reason::noproc when p is not alive.
// demonitor() cancels it (true if no down was delivered yet).
//
// Link: link(p) ties two actors both ways. When one ends abnormally
// (panic or stopped), the other is stopped (request_stop), unless it traps
// exits: then it receives an exit_signal on its trap channel instead, for
// every linked exit, normal ones included. Linking to an actor that is not
// alive returns false (and delivers a noproc exit_signal when trapping).
//
// Thread safety: call from actors; monitor/demonitor/link/unlink/trap_exits
// act on the calling actor.

#include <smarm/channel.hpp>
#include <smarm/pid.hpp>

#include <cstdint>
#include <exception>

namespace smarm {

enum class down_reason {
    exit,     ///< returned normally
    panic,    ///< an exception escaped it (error holds it)
    stopped,  ///< it was stopped
    noproc,   ///< it was not alive when monitored / linked
};

/// Delivered once to a monitor.
struct down {
    std::uint64_t monitor_id = 0;
    pid who;
    down_reason reason = down_reason::exit;
    std::exception_ptr error;
};

/// A monitor: its id and the channel its single `down` arrives on.
struct monitor_ref {
    std::uint64_t id = 0;
    pid target;
    receiver<down> rx;
};

/// Monitors `p`; the down arrives on the returned receiver.
monitor_ref monitor(pid p);
/// Monitors `p`, delivering the down to `to` (e.g. an actor's own inbox of
/// downs for many monitors). Returns the monitor id.
std::uint64_t monitor(pid p, sender<down> to);
/// Cancels monitor `id` on `p`: true when it was still armed.
bool demonitor(pid p, std::uint64_t id);
inline bool demonitor(const monitor_ref& m) {
    return demonitor(m.target, m.id);
}

/// Delivered to an actor that traps exits when a linked actor ends.
struct exit_signal {
    pid from;
    down_reason reason = down_reason::exit;
    std::exception_ptr error;
};

/// Links the calling actor and `p` (idempotent). False when `p` is not alive.
bool link(pid p);
/// Removes the link both ways (idempotent).
void unlink(pid p);
/// From now on linked exits arrive on the returned receiver instead of
/// stopping the caller. Calling it again replaces the channel.
receiver<exit_signal> trap_exits();
/// Stop trapping: abnormal linked exits stop the caller again.
void untrap_exits();

}  // namespace smarm
