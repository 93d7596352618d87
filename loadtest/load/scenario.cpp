#include "scenario.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace smarm::load {

namespace {

std::uint64_t parse_u64(const std::string& s, const std::string& what) {
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty())
        throw scenario_error(what + ": \"" + s + "\" is not a non-negative integer");
    return v;
}

bool is_token_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == ':' || c == '_';
}

}  // namespace

std::vector<path_piece> parse_path(const std::string& path) {
    if (path.empty() || path[0] != '/')
        throw scenario_error("path \"" + path + "\" must start with '/'");
    std::vector<path_piece> out;
    std::string lit;
    for (std::size_t i = 0; i < path.size(); ++i) {
        const char c = path[i];
        if (c == ' ' || c == '\r' || c == '\n')
            throw scenario_error("path \"" + path + "\": whitespace is not allowed");
        if (c != '{') {
            lit += c;
            continue;
        }
        auto end = path.find('}', i);
        if (end == std::string::npos)
            throw scenario_error("path \"" + path + "\": '{' without '}'");
        std::string tok = path.substr(i + 1, end - i - 1);
        if (!std::all_of(tok.begin(), tok.end(), is_token_char))
            throw scenario_error("path \"" + path + "\": bad token {" + tok + "}");
        if (!lit.empty()) out.push_back({path_piece::literal, std::move(lit), 0});
        lit.clear();
        if (tok == "seq") {
            out.push_back({path_piece::seq, {}, 0});
        } else if (tok == "conn") {
            out.push_back({path_piece::conn, {}, 0});
        } else if (tok.rfind("random:", 0) == 0) {
            auto n = parse_u64(tok.substr(7), "path \"" + path + "\": {" + tok + "}");
            if (n == 0) throw scenario_error("path \"" + path + "\": {" + tok + "}: bound is 0");
            out.push_back({path_piece::random, {}, n});
        } else {
            throw scenario_error("path \"" + path + "\": unknown token {" + tok +
                                 "} (allowed: {random:N}, {seq}, {conn})");
        }
        i = end;
    }
    if (!lit.empty()) out.push_back({path_piece::literal, std::move(lit), 0});
    return out;
}

scenario scenario::single(std::string method, const std::string& path, std::uint64_t body_size,
                          std::vector<std::pair<std::string, std::string>> headers) {
    scenario s;
    request_template t;
    t.method = std::move(method);
    t.path_text = path;
    t.path = parse_path(path);
    t.name = t.method + " " + path;
    t.body_min = t.body_max = body_size;
    t.headers = std::move(headers);
    s.reqs_.push_back(std::move(t));
    s.finish();
    return s;
}

scenario scenario::from_file(const std::string& file) {
    std::ifstream in(file);
    if (!in) throw scenario_error("scenario " + file + ": cannot be read");
    std::stringstream ss;
    ss << in.rdbuf();
    return from_yaml(ss.str(), file);
}

scenario scenario::from_yaml(const std::string& text, const std::string& origin) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw scenario_error("scenario " + origin + ": " + e.what());
    }
    if (!root.IsMap() || !root["requests"] || !root["requests"].IsSequence() ||
        root["requests"].size() == 0)
        throw scenario_error("scenario " + origin + ": needs a non-empty list \"requests\"");
    for (auto it = root.begin(); it != root.end(); ++it)
        if (it->first.as<std::string>() != "requests")
            throw scenario_error("scenario " + origin + ": unknown key \"" +
                                 it->first.as<std::string>() + "\"");
    scenario s;
    std::size_t idx = 0;
    for (const auto& r : root["requests"]) {
        const std::string where =
            "scenario " + origin + ": requests[" + std::to_string(idx++) + "]";
        if (!r.IsMap()) throw scenario_error(where + ": must be a map");
        request_template t;
        try {
            for (auto it = r.begin(); it != r.end(); ++it) {
                const auto key = it->first.as<std::string>();
                const YAML::Node v = it->second;
                if (key == "name") {
                    t.name = v.as<std::string>();
                } else if (key == "weight") {
                    t.weight = parse_u64(v.as<std::string>(), where + ".weight");
                } else if (key == "method") {
                    t.method = v.as<std::string>();
                    if (t.method.empty() ||
                        !std::all_of(t.method.begin(), t.method.end(),
                                     [](char c) { return c >= 'A' && c <= 'Z'; }))
                        throw scenario_error(where + ".method: \"" + t.method +
                                             "\" is not an upper-case token");
                } else if (key == "path") {
                    t.path_text = v.as<std::string>();
                    t.path = parse_path(t.path_text);
                } else if (key == "body") {
                    if (!v.IsMap()) throw scenario_error(where + ".body: must be a map");
                    if (v["size"]) {
                        t.body_min = t.body_max =
                            parse_u64(v["size"].as<std::string>(), where + ".body.size");
                    } else if (v["min"] && v["max"]) {
                        t.body_min = parse_u64(v["min"].as<std::string>(), where + ".body.min");
                        t.body_max = parse_u64(v["max"].as<std::string>(), where + ".body.max");
                        if (t.body_min > t.body_max)
                            throw scenario_error(where + ".body: min > max");
                    } else {
                        throw scenario_error(where + ".body: needs size, or min and max");
                    }
                } else if (key == "headers") {
                    if (!v.IsMap()) throw scenario_error(where + ".headers: must be a map");
                    for (auto h = v.begin(); h != v.end(); ++h)
                        t.headers.emplace_back(h->first.as<std::string>(),
                                               h->second.as<std::string>());
                } else {
                    throw scenario_error(where + ": unknown key \"" + key +
                                         "\" (allowed: name, weight, method, path, body, "
                                         "headers)");
                }
            }
        } catch (const YAML::Exception& e) {
            throw scenario_error(where + ": " + e.what());
        } catch (const scenario_error& e) {
            const std::string m = e.what();
            if (m.rfind("scenario ", 0) == 0) throw;
            throw scenario_error(where + ": " + m);
        }
        if (t.path.empty()) throw scenario_error(where + ": needs a path");
        if (t.weight == 0) throw scenario_error(where + ".weight: must be at least 1");
        if (t.name.empty()) t.name = t.method + " " + t.path_text;
        s.reqs_.push_back(std::move(t));
    }
    s.finish();
    return s;
}

void scenario::finish() {
    std::uint64_t sum = 0;
    cumulative_.clear();
    for (auto& r : reqs_)
        cumulative_.push_back(sum += r.weight);
}

bool scenario::is_fixed() const {
    if (reqs_.size() != 1) return false;
    const auto& r = reqs_.front();
    if (r.body_min != r.body_max) return false;
    return std::all_of(r.path.begin(), r.path.end(),
                       [](const path_piece& p) { return p.kind == path_piece::literal; });
}

std::size_t scenario::pick(std::mt19937_64& rng) const {
    if (reqs_.size() == 1) return 0;
    const std::uint64_t x = rng() % cumulative_.back();
    return static_cast<std::size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), x) -
                                    cumulative_.begin());
}

void scenario::render(std::size_t i, std::mt19937_64& rng, std::uint64_t seq, std::uint64_t conn,
                      const std::string& host_header, bool close, std::string& out) const {
    const auto& r = reqs_[i];
    out.clear();
    out += r.method;
    out += ' ';
    for (const auto& p : r.path) {
        switch (p.kind) {
            case path_piece::literal:
                out += p.text;
                break;
            case path_piece::random:
                out += std::to_string(rng() % p.n);
                break;
            case path_piece::seq:
                out += std::to_string(seq);
                break;
            case path_piece::conn:
                out += std::to_string(conn);
                break;
        }
    }
    out += " HTTP/1.1\r\nHost: ";
    out += host_header;
    out += "\r\n";
    for (const auto& [k, v] : r.headers) {
        out += k;
        out += ": ";
        out += v;
        out += "\r\n";
    }
    if (close) out += "Connection: close\r\n";
    std::uint64_t body = r.body_min;
    if (r.body_max > r.body_min) body += rng() % (r.body_max - r.body_min + 1);
    if (body > 0 || r.has_body()) {
        out += "Content-Length: ";
        out += std::to_string(body);
        out += "\r\n";
    }
    out += "\r\n";
    out.append(body, 'x');
}

}  // namespace smarm::load
