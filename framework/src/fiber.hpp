#pragma once
// Context switching between scheduler threads and actors.
//
// Built on Boost.Context's fcontext: make_fcontext makes the contexts, and
// switches go through its jump_fcontext, or on x86-64 Linux (no sanitizer) through
// switch_x86_64_sysv.S (the same frame layout), which the hot parks in
// headers call from the actor's own code (detail/wait.hpp park_here). Every
// switch is annotated for the sanitizers in those builds (ASan:
// __sanitizer_start/finish_switch_fiber; TSan: one fiber per actor and
// __tsan_switch_to_fiber), and carries the C++ runtime's per-thread
// exception state (__cxa_eh_globals: the caught-exception stack and the
// uncaught count) with the actor, because an actor may park inside a catch
// block and resume on another thread.

#include "runtime_impl.hpp"

#include "internal.hpp"

namespace smarm::internal {

/// Prepare `sl` to start `entry` on its stack below `sp`.
void fiber_init(slot& sl, char* sp);
void fiber_destroy(slot& sl) noexcept;
/// Scheduler side: run `sl` until it switches back. Returns its reason.
switch_reason fiber_resume(scheduler& s, slot& sl) noexcept;
/// Actor side: switch back to the scheduler running us. Returns when some
/// scheduler resumes the actor again (never for `finish`), with the actor's
/// slot: a cheap way to re-check its stop flag without another TLS read.
slot& fiber_suspend(switch_reason why) noexcept;
/// Called once per scheduler thread before its loop.
void fiber_thread_init(scheduler& s) noexcept;

}  // namespace smarm::internal
