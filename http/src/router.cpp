#include <smarm/http/router.hpp>

#include "request_access.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>

namespace smarm::http {

namespace {

int hex(char c) noexcept {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/// Splits "/a/b/" into {"a", "b", ""}; the leading '/' is required.
std::vector<std::string_view> split_path(std::string_view p) {
    std::vector<std::string_view> out;
    std::size_t i = 1;
    for (;;) {
        auto j = p.find('/', i);
        if (j == std::string_view::npos) {
            out.push_back(p.substr(i));
            return out;
        }
        out.push_back(p.substr(i, j - i));
        i = j + 1;
    }
}

const char* method_name(verb v) {
    return boost::beast::http::to_string(v).data();
}

}  // namespace

bool percent_decode(std::string_view in, std::string& out) {
    if (in.find('%') == std::string_view::npos) {  // the usual case
        out.assign(in.data(), in.size());
        return true;
    }
    out.clear();
    out.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        char c = in[i];
        if (c != '%') {
            out.push_back(c);
            continue;
        }
        if (i + 2 >= in.size()) return false;
        int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
        if (hi < 0 || lo < 0) return false;
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
    }
    return true;
}

router& router::add(verb method, std::string_view pattern, handler h) {
    auto bad = [&](const char* why) {
        throw std::invalid_argument("smarm::http::router: bad pattern \"" + std::string(pattern) +
                                    "\": " + why);
    };
    if (pattern.empty() || pattern[0] != '/') bad("it must start with '/'");
    if (!h) bad("the handler is empty");
    entry e{method, std::string(pattern), {}, std::move(h), {}, std::nullopt};
    auto parts = split_path(pattern);
    for (std::size_t i = 0; i < parts.size(); ++i) {
        auto s = parts[i];
        if (s == "*") {
            if (i + 1 != parts.size()) bad("'*' may only be the last segment");
            e.segments.push_back({segment::wildcard, {}});
        } else if (!s.empty() && s.front() == '{') {
            if (s.size() < 3 || s.back() != '}') bad("a parameter is written {name}");
            std::string name(s.substr(1, s.size() - 2));
            for (auto& other : e.segments)
                if (other.kind == segment::param && other.text == name)
                    bad("a parameter name is used twice");
            e.segments.push_back({segment::param, std::move(name)});
        } else {
            if (s.find_first_of("{}*") != std::string_view::npos)
                bad("'{', '}' and '*' are only allowed as whole segments");
            std::string lit;
            if (!percent_decode(s, lit)) bad("a literal segment has a bad %-escape");
            e.segments.push_back({segment::literal, std::move(lit)});
        }
    }
    for (auto& r : routes_) {
        if (r.method != method || r.segments.size() != e.segments.size()) continue;
        bool same = true;
        for (std::size_t i = 0; i < r.segments.size() && same; ++i)
            same = r.segments[i].kind == e.segments[i].kind &&
                   (r.segments[i].kind != segment::literal ||
                    r.segments[i].text == e.segments[i].text);
        if (same)
            throw std::invalid_argument(
                "smarm::http::router: route " + std::string(method_name(method)) + " \"" +
                std::string(pattern) + "\" duplicates \"" + r.pattern + "\"");
    }
    // An all-literal route is also found by its path in one lookup (match's
    // fast path). Not when a literal holds an escaped '/': its path would
    // read as more segments than it has.
    bool exact = true;
    std::string key;
    for (auto& sg : e.segments) {
        exact = exact && sg.kind == segment::literal && sg.text.find('/') == std::string::npos;
        key += '/';
        key += sg.text;
    }
    if (exact) {
        exact_lengths_ |= std::uint64_t{1} << (key.size() & 63);
        exact_[std::move(key)].push_back(routes_.size());
    }
    routes_.push_back(std::move(e));
    return *this;
}

router& router::add(verb method, std::string_view pattern, handler h, streamed_body body) {
    if (body.limit == 0)
        throw std::invalid_argument("smarm::http::router: route \"" + std::string(pattern) +
                                    "\": a streamed body's limit must be > 0");
    add(method, pattern, std::move(h));
    routes_.back().streamed = body;
    stream_limit_ = std::max(stream_limit_, body.limit);
    return *this;
}

router& router::add_routed(verb method, std::string_view pattern, std::string service, handler h) {
    add(method, pattern, std::move(h));
    routes_.back().service = std::move(service);
    return *this;
}

std::vector<route_info> router::routes() const {
    std::vector<route_info> out;
    out.reserve(routes_.size());
    for (const entry& e : routes_)
        out.push_back({e.method, e.pattern, e.service, e.streamed.has_value()});
    return out;
}

std::string route_info::name() const {
    return std::string(method_name(method)) + " " + pattern;
}

route_match router::match(request& req) const {
    // The decoded path split into segments. Splitting the raw target first
    // and decoding each segment keeps an encoded '/' inside its segment.
    // Without a '%' the segments are views into the target: no allocation.
    const std::string_view raw_path = http::raw_path(req.target());
    route_match out;
    if (raw_path.empty() || raw_path[0] != '/') {
        out.status = status::bad_request;
        return out;
    }
    const bool escaped = raw_path.find('%') != std::string_view::npos;
    // Fast path: an unescaped path that names an all-literal route for this
    // method. Such a route is the most specific there can be (a literal
    // for every segment), so the scan below would pick it too: the first
    // added when HEAD finds both a GET and a HEAD route. Anything else (no
    // such route, or only for other methods: 405 needs them all) scans. A
    // path whose length no such route has is not even hashed.
    if (!escaped && (exact_lengths_ >> (raw_path.size() & 63) & 1) != 0) {
        if (auto it = exact_.find(raw_path); it != exact_.end()) {
            for (std::size_t i : it->second) {
                const entry& r = routes_[i];
                if (r.method == req.method() ||
                    (req.method() == verb::head && r.method == verb::get)) {
                    out.target = &r.h;
                    out.streamed = r.streamed ? &*r.streamed : nullptr;
                    out.status = status::ok;
                    out.index = i;
                    request_access::params(req).clear();
                    request_access::wildcard(req).clear();
                    request_access::route(req) = r.pattern;
                    return out;
                }
            }
        }
    }
    constexpr std::size_t inline_segments = 16;
    std::array<std::string_view, inline_segments> seg_inline;
    std::vector<std::string_view> seg_heap;
    std::vector<std::string> decoded;  // storage when something was escaped
    std::size_t nseg = 0;
    for (std::size_t at = 1;;) {
        auto slash = raw_path.find('/', at);
        std::string_view raw = raw_path.substr(
            at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
        std::string_view seg = raw;
        if (escaped) {
            decoded.emplace_back();
            if (!percent_decode(raw, decoded.back())) {
                out.status = status::bad_request;
                return out;
            }
        }
        if (nseg < inline_segments && seg_heap.empty()) {
            seg_inline[nseg] = seg;
        } else {
            if (seg_heap.empty()) seg_heap.assign(seg_inline.begin(), seg_inline.end());
            seg_heap.push_back(seg);
        }
        ++nseg;
        if (slash == std::string_view::npos) break;
        at = slash + 1;
    }
    if (escaped) {  // point the views at the decoded strings (stable now)
        for (std::size_t k = 0; k < nseg; ++k) {
            if (seg_heap.empty())
                seg_inline[k] = decoded[k];
            else
                seg_heap[k] = decoded[k];
        }
    }
    auto seg = [&](std::size_t k) -> std::string_view {
        return seg_heap.empty() ? seg_inline[k] : seg_heap[k];
    };

    // Specificity: per segment 2 literal, 1 param, 0 wildcard, compared
    // lexicographically; packed two bits a segment (the first 32 count).
    auto digit = [](std::uint64_t& score, std::size_t k, std::uint64_t w) {
        if (k < 32) score |= w << (2 * (31 - k));
    };
    const entry* best = nullptr;
    std::uint64_t best_score = 0;
    bool best_wild = false;
    std::uint64_t allowed = 0;  // bit per verb routed for this path
    const verb m = req.method() == verb::head ? verb::get : req.method();
    for (auto& r : routes_) {
        const bool has_wild = !r.segments.empty() && r.segments.back().kind == segment::wildcard;
        const std::size_t fixed = r.segments.size() - (has_wild ? 1 : 0);
        if (has_wild ? nseg < fixed : nseg != fixed) continue;
        std::uint64_t score = 0;
        bool ok = true;
        for (std::size_t k = 0; k < fixed && ok; ++k) {
            auto& sg = r.segments[k];
            if (sg.kind == segment::literal) {
                ok = seg(k) == sg.text;
                digit(score, k, 2);
            } else {
                ok = !seg(k).empty();
                digit(score, k, 1);
            }
        }
        if (!ok) continue;
        if (r.method != m && !(req.method() == verb::head && r.method == verb::head)) {
            allowed |= std::uint64_t{1} << (static_cast<unsigned>(r.method) & 63);
            continue;
        }
        // At equal digits a route without a wildcard wins: "/a" is more
        // specific for "/a" than "/a/*" matching an empty rest.
        if (!best || score > best_score || (score == best_score && best_wild && !has_wild)) {
            best = &r;
            best_score = score;
            best_wild = has_wild;
        }
    }
    if (!best) {
        if (allowed != 0) {
            out.status = status::method_not_allowed;
            if (allowed & (std::uint64_t{1} << static_cast<unsigned>(verb::get)))
                allowed |= std::uint64_t{1} << static_cast<unsigned>(verb::head);
            std::vector<std::string_view> names;
            for (unsigned v = 0; v < 64; ++v)
                if (allowed & (std::uint64_t{1} << v))
                    names.push_back(method_name(static_cast<verb>(v)));
            std::sort(names.begin(), names.end());
            for (auto n : names) {
                if (!out.allow.empty()) out.allow += ", ";
                out.allow += n;
            }
        }
        return out;
    }
    out.target = &best->h;
    out.streamed = best->streamed ? &*best->streamed : nullptr;
    out.status = status::ok;
    out.index = static_cast<std::size_t>(best - routes_.data());
    auto& params = request_access::params(req);
    params.clear();
    std::string& wild = request_access::wildcard(req);
    wild.clear();
    for (std::size_t k = 0; k < best->segments.size(); ++k) {
        auto& sg = best->segments[k];
        if (sg.kind == segment::param) {
            params.emplace_back(sg.text, std::string(seg(k)));
        } else if (sg.kind == segment::wildcard) {
            for (std::size_t w = k; w < nseg; ++w) {
                if (w > k) wild += '/';
                wild += seg(w);
            }
        }
    }
    request_access::route(req) = best->pattern;
    return out;
}

}  // namespace smarm::http
