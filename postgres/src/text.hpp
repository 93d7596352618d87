#pragma once
// What the module's messages share.

#include <chrono>
#include <string>

namespace smarm::postgres::internal {

/// A duration as "1500 ms" for error messages.
inline std::string ms_text(std::chrono::nanoseconds d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

}  // namespace smarm::postgres::internal
