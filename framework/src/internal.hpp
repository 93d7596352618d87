#pragma once
// The two namespaces of framework code. smarm::detail holds the installed
// helpers that public templates need (include/smarm/detail/, and the detail
// blocks of public headers); smarm::internal holds everything src-only (the
// scheduler, slots, timers, the IO driver), which no public header names
// except as an opaque forward declaration. src code sees the installed
// helpers unqualified; the reverse direction is always spelled internal::.

namespace smarm::detail {}

namespace smarm::internal {
using namespace smarm::detail;
}  // namespace smarm::internal
