#pragma once
// smarm::pid — the identity of one actor incarnation.

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace smarm {

/// An actor's process identifier: the index of its slot in the runtime's slot
/// table plus the slot's generation at spawn time.
///
/// A slot's generation is bumped every time the slot is reclaimed, so a pid
/// whose actor has finished and whose slot now hosts another actor is still
/// *decidably* stale: every runtime operation on it is a no-op or reports the
/// actor as gone. Never keep just the index anywhere.
///
/// Thread safety: a plain value type; copy it freely between threads.
struct pid {
    std::uint32_t index = invalid_index;
    std::uint32_t generation = 0;

    static constexpr std::uint32_t invalid_index = 0xffff'ffffu;

    /// True for a pid that names some actor incarnation (live or not).
    constexpr bool valid() const noexcept { return index != invalid_index; }

    friend constexpr auto operator<=>(const pid&, const pid&) = default;

    /// Erlang-style rendering: `<0.INDEX.GENERATION>`.
    std::string to_string() const {
        return "<0." + std::to_string(index) + "." + std::to_string(generation) + ">";
    }
    friend std::ostream& operator<<(std::ostream& os, const pid& p) { return os << p.to_string(); }
};

}  // namespace smarm

template <>
struct std::hash<smarm::pid> {
    std::size_t operator()(const smarm::pid& p) const noexcept {
        return std::hash<std::uint64_t>{}((std::uint64_t{p.generation} << 32) | p.index);
    }
};
