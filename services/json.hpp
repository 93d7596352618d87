#pragma once
// The one JSON string writer the built-in services share (/kv listings,
// /debug/actors): quotes, escapes '"', '\\' and control characters.

#include <cstdio>
#include <string>
#include <string_view>

namespace smarm::services {

/// Appends `s` to `out` as a JSON string literal.
inline void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
        } else {
            out += static_cast<char>(c);
        }
    }
    out += '"';
}

}  // namespace smarm::services
