#pragma once
// Checked contracts for smarm's own code (framework, http, and the
// header-only templates).
//
// - SMARM_ASSERT(cond): a precondition or a state transition's "from"
//   state, checked in debug builds (no NDEBUG) and in the sanitizer
//   presets (SMARM_ENABLE_ASSERTS); compiled out (and not evaluated)
//   otherwise. For checks on hot paths: "caller holds X", "the word is
//   Queued".
// - SMARM_INVARIANT(cond, "subsystem: what"): always on, for states whose
//   corruption would spread silently (a slot handed out twice, a timer
//   index out of its heap): one predicted branch when it holds.
//
// A failed check prints the condition, the message, file and line to
// stderr and aborts: a core dump at the first wrong state, not a hang
// three subsystems later.

namespace smarm::detail {

[[noreturn, gnu::cold, gnu::noinline]] void contract_failed(const char* kind, const char* cond,
                                                            const char* what, const char* file,
                                                            int line) noexcept;

}  // namespace smarm::detail

#define SMARM_INVARIANT(cond, what)               \
    (__builtin_expect(static_cast<bool>(cond), 1) \
         ? static_cast<void>(0)                   \
         : ::smarm::detail::contract_failed("invariant", #cond, what, __FILE__, __LINE__))

#if !defined(NDEBUG) || defined(SMARM_ENABLE_ASSERTS)
#define SMARM_ASSERTS_ON 1
#define SMARM_ASSERT(cond)                        \
    (__builtin_expect(static_cast<bool>(cond), 1) \
         ? static_cast<void>(0)                   \
         : ::smarm::detail::contract_failed("assertion", #cond, nullptr, __FILE__, __LINE__))
#else
#define SMARM_ASSERTS_ON 0
// Not evaluated, but still compiled: a check that stops compiling is found
// in release builds too.
#define SMARM_ASSERT(cond) static_cast<void>(sizeof(static_cast<bool>(cond)))
#endif
