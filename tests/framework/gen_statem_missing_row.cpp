// Compile-time check of a gen_statem table (no runtime test here).
//
// Built by ctest with -fsyntax-only twice: as is it must compile
// (gen_statem.table_complete_compiles); with -DSMARM_DROP_ROW one
// (state, event) row is gone and the build must fail
// (gen_statem.table_missing_row_fails, WILL_FAIL) with the table's own
// diagnostic naming the pair (gen_statem.table_missing_row_names_pair).

#include <smarm/gen_statem.hpp>

#include <variant>

namespace statem = smarm::statem;

struct idle {};
struct busy {};
struct start {};
struct finish {};
using state = std::variant<idle, busy>;
using event = std::variant<start, finish>;
using result = statem::result<state>;
using cx = statem::ctx<event>;
struct data {};

auto rows = statem::table{
    [](idle&, start&, data&, cx&) -> result { return busy{}; },
    [](busy&, finish&, data&, cx&) -> result { return idle{}; },
    [](busy&, start&, data&, cx&) -> result { return statem::postpone; },
#ifndef SMARM_DROP_ROW
    [](idle&, finish&, data&, cx&) -> result { return statem::unhandled; },
#endif
};

using machine = statem::table_machine<state, event, data, decltype(rows)>;
static_assert(statem::machine<machine>);
// Instantiating the machine class runs the totality check.
[[maybe_unused]] machine* instantiate(machine& m) {
    return &m;
}
constexpr auto size = sizeof(machine);

int main() {
    return size == 0;
}
