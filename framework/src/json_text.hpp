#pragma once
// JSON text helpers shared by the framework's exporters (causal reports,
// traces).

#include <cstdio>
#include <string>
#include <string_view>

namespace smarm::internal {

/// Appends `s` to `out` as a JSON string literal (quotes included).
inline void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (unsigned char ch : s) {
        if (ch == '"' || ch == '\\') {
            out += '\\';
            out += static_cast<char>(ch);
        } else if (ch < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", ch);
            out += b;
        } else {
            out += static_cast<char>(ch);
        }
    }
    out += '"';
}

/// `s` as a JSON string literal.
inline std::string json_string(std::string_view s) {
    std::string o;
    o.reserve(s.size() + 2);
    append_json_string(o, s);
    return o;
}

}  // namespace smarm::internal
