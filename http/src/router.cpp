#include <smarm/http/router.hpp>

#include "request_access.hpp"

#include <algorithm>
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
    entry e{method, std::string(pattern), {}, std::move(h)};
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
    routes_.push_back(std::move(e));
    return *this;
}

route_match router::match(request& req) const {
    // The decoded path split into segments. Splitting the raw target first
    // and decoding each segment keeps an encoded '/' inside its segment.
    std::string_view target(req.target());
    auto q = target.find_first_of("?#");
    std::string_view raw_path = target.substr(0, q);
    route_match out;
    if (raw_path.empty() || raw_path[0] != '/') {
        out.status = status::bad_request;
        return out;
    }
    auto raw = split_path(raw_path);
    std::vector<std::string> segs(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i)
        if (!percent_decode(raw[i], segs[i])) {
            out.status = status::bad_request;
            return out;
        }

    // Score: per segment 2 literal, 1 param, 0 wildcard; lexicographic.
    const entry* best = nullptr;
    std::vector<int> best_score, score;
    bool other_methods = false;
    std::vector<verb> allowed;
    const verb m = req.method() == verb::head ? verb::get : req.method();
    for (auto& r : routes_) {
        score.clear();
        bool ok = true;
        std::size_t i = 0;
        for (; i < r.segments.size() && ok; ++i) {
            auto& s = r.segments[i];
            if (s.kind == segment::wildcard) {
                score.push_back(0);
                i = r.segments.size();
                break;
            }
            if (i >= segs.size()) {
                ok = false;
                break;
            }
            if (s.kind == segment::literal) {
                ok = segs[i] == s.text;
                score.push_back(2);
            } else {
                ok = !segs[i].empty();
                score.push_back(1);
            }
        }
        bool has_wild = !r.segments.empty() && r.segments.back().kind == segment::wildcard;
        if (!ok || (!has_wild && r.segments.size() != segs.size()) ||
            (has_wild && segs.size() + 1 < r.segments.size()))
            continue;
        if (r.method != m && !(req.method() == verb::head && r.method == verb::head)) {
            other_methods = true;
            if (std::find(allowed.begin(), allowed.end(), r.method) == allowed.end())
                allowed.push_back(r.method);
            continue;
        }
        if (!best || score > best_score) {
            best = &r;
            best_score = score;
        }
    }
    if (!best) {
        if (other_methods) {
            out.status = status::method_not_allowed;
            if (std::find(allowed.begin(), allowed.end(), verb::get) != allowed.end() &&
                std::find(allowed.begin(), allowed.end(), verb::head) == allowed.end())
                allowed.push_back(verb::head);
            std::sort(allowed.begin(), allowed.end(), [](verb a, verb b) {
                return std::string_view(method_name(a)) < std::string_view(method_name(b));
            });
            for (auto v : allowed) {
                if (!out.allow.empty()) out.allow += ", ";
                out.allow += method_name(v);
            }
        }
        return out;
    }
    out.target = &best->h;
    out.status = status::ok;
    auto& params = request_access::params(req);
    params.clear();
    std::string& wild = request_access::wildcard(req);
    wild.clear();
    for (std::size_t i = 0; i < best->segments.size(); ++i) {
        auto& s = best->segments[i];
        if (s.kind == segment::param) {
            params.emplace_back(s.text, std::move(segs[i]));
        } else if (s.kind == segment::wildcard) {
            for (std::size_t k = i; k < segs.size(); ++k) {
                if (k > i) wild += '/';
                wild += segs[k];
            }
        }
    }
    request_access::route(req) = best->pattern;
    return out;
}

}  // namespace smarm::http
