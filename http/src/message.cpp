#include <smarm/http/message.hpp>
#include <smarm/http/router.hpp>

#include "body_source.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <stdexcept>

namespace smarm::http {

namespace {
char lower(char c) noexcept {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}
}  // namespace

bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (lower(a[i]) != lower(b[i])) return false;
    return true;
}

std::string request::read_body(std::size_t max) {
    if (max == 0) throw std::invalid_argument("smarm::http::request::read_body: max must be > 0");
    std::string out;
    if (source_ != nullptr) {
        source_->read(out, max);
        return out;
    }
    const std::size_t n = std::min(max, body_.size() - body_read_);
    out.assign(body_, body_read_, n);
    body_read_ += n;
    return out;
}

std::string_view request::query() const noexcept {
    auto q = target_.find('?');
    if (q == std::string::npos) return {};
    return std::string_view(target_).substr(q + 1);
}

namespace {
/// Parameter `name` of an encoded `a=1&b=2` list: present (the decoded
/// value) or not; `form`: '+' is a space (application/x-www-form-urlencoded).
/// A bad escape reads as absent.
std::optional<std::string> find_param(std::string_view list, std::string_view name, bool form) {
    while (!list.empty()) {
        const auto amp = list.find('&');
        const auto part = list.substr(0, amp);
        const auto eq = part.find('=');
        if (part.substr(0, eq) == name) {
            std::string raw(eq == std::string_view::npos ? "" : part.substr(eq + 1));
            if (form)
                for (char& c : raw)
                    if (c == '+') c = ' ';
            std::string out;
            if (!percent_decode(raw, out)) return std::nullopt;
            return out;
        }
        if (amp == std::string_view::npos) break;
        list.remove_prefix(amp + 1);
    }
    return std::nullopt;
}
}  // namespace

std::optional<std::string> request::query_param(std::string_view name) const {
    return find_param(query(), name, false);
}

std::optional<std::string> request::form_param(std::string_view name) const {
    if (auto ct = header("Content-Type")) {
        const std::string_view type = ct->substr(0, ct->find(';'));
        std::string_view t = type;
        while (!t.empty() && (t.back() == ' ' || t.back() == '\t'))
            t.remove_suffix(1);
        if (iequals(t, "application/x-www-form-urlencoded"))
            if (auto v = find_param(body_, name, true)) return v;
    }
    return query_param(name);
}

std::optional<std::string_view> request::header(std::string_view name) const noexcept {
    for (auto& h : headers_)
        if (iequals(h.name, name)) return std::string_view(h.value);
    return std::nullopt;
}

std::optional<std::string_view> request::param(std::string_view name) const noexcept {
    for (auto& [k, v] : params_)
        if (k == name) return std::string_view(v);
    return std::nullopt;
}

std::string request::id() const {
    char buf[40];
    char* p = std::to_chars(buf, buf + 16, connection_id_, 16).ptr;
    *p++ = '-';
    p = std::to_chars(p, buf + sizeof buf, sequence_, 16).ptr;
    return std::string(buf, p);
}

response response::file(std::string path, std::string content_type) {
    response r(http::status::ok, std::move(path), std::move(content_type));
    r.kind_ = body_kind::file;
    return r;
}

response response::chunked(chunk_source next, std::string content_type) {
    response r(http::status::ok, {}, std::move(content_type));
    r.kind_ = body_kind::chunks;
    r.chunks_ = std::move(next);
    return r;
}

void response::refuse_content_type() {
    throw std::invalid_argument(
        "smarm::http::response: header \"Content-Type\" contains a line break");
}

response& response::set_content_type(std::string ct) {
    if (has_line_break(ct)) refuse_content_type();
    content_type_ = std::move(ct);
    custom_type_ = true;
    return *this;
}

response& response::set(std::string name, std::string value) {
    for (std::string_view managed :
         {"content-length", "transfer-encoding", "date", "server", "connection"})
        if (iequals(name, managed))
            throw std::invalid_argument("smarm::http::response::set: the header \"" + name +
                                        "\" is managed by the server");
    // Header text is written into the head as is: a line break in it would
    // end the header there and start another (response splitting).
    if (has_line_break(name) || has_line_break(value))
        throw std::invalid_argument("smarm::http::response::set: header \"" + name +
                                    "\" contains a line break");
    if (iequals(name, "content-type")) return set_content_type(std::move(value));
    headers_.push_back({std::move(name), std::move(value)});
    return *this;
}

std::optional<std::string_view> response::header(std::string_view name) const noexcept {
    if (iequals(name, "content-type")) return std::string_view(content_type());
    for (auto& h : headers_)
        if (iequals(h.name, name)) return std::string_view(h.value);
    return std::nullopt;
}

}  // namespace smarm::http
