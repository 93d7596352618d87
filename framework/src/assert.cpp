// The failure path of SMARM_ASSERT / SMARM_INVARIANT (detail/assert.hpp).

#include <smarm/detail/assert.hpp>

#include <cstdio>
#include <cstdlib>

namespace smarm::detail {

void contract_failed(const char* kind, const char* cond, const char* what, const char* file,
                     int line) noexcept {
    // stdio, not a logger: the process may be in no state to format or
    // allocate much, and the line must reach stderr before the abort.
    if (what)
        std::fprintf(stderr, "smarm: %s failed: %s (%s) at %s:%d\n", kind, what, cond, file, line);
    else
        std::fprintf(stderr, "smarm: %s failed: %s at %s:%d\n", kind, cond, file, line);
    std::fflush(stderr);
    std::abort();
}

}  // namespace smarm::detail
