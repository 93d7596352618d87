#include "kv.hpp"

#include "json.hpp"

#include <smarm/io.hpp>

#include <spdlog/spdlog.h>

#include <charconv>
#include <system_error>

namespace smarm::services {

namespace {

/// The value of `name` in a query string (not decoded: keys are
/// percent-decoded by the caller), or nullopt.
std::optional<std::string> query_param(std::string_view q, std::string_view name) {
    while (!q.empty()) {
        auto amp = q.find('&');
        auto part = q.substr(0, amp);
        auto eq = part.find('=');
        if (part.substr(0, eq) == name) {
            std::string out;
            if (!http::percent_decode(eq == std::string_view::npos ? "" : part.substr(eq + 1), out))
                return std::nullopt;
            return out;
        }
        if (amp == std::string_view::npos) break;
        q.remove_prefix(amp + 1);
    }
    return std::nullopt;
}

}  // namespace

kv_server::kv_server(kv_options o) : opts_(std::move(o)) {
    if (opts_.log_path.empty()) return;
    log_ = smarm::block_on_io([this] {
        return std::make_unique<kv_log>(opts_.log_path, opts_.sync, opts_.compact_bytes, data_);
    });
}

http::response kv_server::handle_call(http::request req) {
    if (req.route() == "/kv") return list(req);
    std::string key(req.param("key").value_or(""));
    switch (req.method()) {
        case http::verb::get:
        case http::verb::head: {
            auto it = data_.find(key);
            if (it == data_.end()) return http::response(http::status::not_found, "no such key\n");
            return http::response(http::status::ok, it->second, "application/octet-stream");
        }
        case http::verb::put: {
            if (req.body().size() > opts_.value_limit)
                return http::response(
                    http::status::payload_too_large,
                    "value larger than " + std::to_string(opts_.value_limit) + " bytes\n");
            if (log_ && !logged([&] { log_->put(key, req.body()); }))
                return http::response(http::status::service_unavailable, "storage failed\n");
            auto [it, fresh] = data_.insert_or_assign(std::move(key), std::move(req.body()));
            (void)it;
            compact();
            return acknowledge(
                http::response(fresh ? http::status::created : http::status::no_content));
        }
        case http::verb::delete_: {
            auto it = data_.find(key);
            if (it == data_.end()) return http::response(http::status::not_found, "no such key\n");
            if (log_ && !logged([&] { log_->erase(key); }))
                return http::response(http::status::service_unavailable, "storage failed\n");
            data_.erase(it);
            compact();
            return acknowledge(http::response(http::status::no_content));
        }
        default:
            return http::response(http::status::method_not_allowed, "method not allowed\n");
    }
}

http::response kv_server::acknowledge(http::response r) {
    if (!log_ || opts_.sync != sync_mode::group) return r;
    unsynced_.emplace_back(defer_reply(), std::move(r));
    if (!group_armed_) {
        group_armed_ = true;
        arm_after(opts_.group_interval, 1);
    }
    return http::response();  // discarded: the answer goes out after the sync
}

void kv_server::handle_timer(std::uint64_t) {
    group_armed_ = false;
    auto batch = std::move(unsynced_);
    unsynced_.clear();
    // A failed sync throws: the server ends, the callers see 503 (their
    // replies are dropped), and the restarted server replays what the
    // disk actually holds.
    smarm::block_on_io([this] { log_->sync(); });
    for (auto& [to, r] : batch)
        (void)to.send(std::move(r));
}

template <class F>
bool kv_server::logged(F&& write) {
    try {
        smarm::block_on_io([&] { write(); });
        return true;
    } catch (const std::system_error& e) {
        spdlog::error("kv: {}", e.what());
        return false;
    }
}

void kv_server::compact() {
    if (!log_ || log_->size() < opts_.compact_bytes) return;
    try {
        smarm::block_on_io([this] { log_->maybe_compact(data_); });
    } catch (const std::system_error& e) {
        spdlog::error("kv: compaction failed (the log stays as it was): {}", e.what());
    }
}

http::response kv_server::list(const http::request& req) const {
    std::size_t limit = 100;
    if (auto l = query_param(req.query(), "limit")) {
        std::size_t v = 0;
        auto r = std::from_chars(l->data(), l->data() + l->size(), v);
        if (r.ec != std::errc() || r.ptr != l->data() + l->size() || v == 0 || v > 1000)
            return http::response(http::status::bad_request, "limit must be 1..1000\n");
        limit = v;
    }
    auto it = data_.begin();
    if (auto after = query_param(req.query(), "after")) it = data_.upper_bound(*after);
    std::string body = "{\"keys\":[";
    std::size_t n = 0;
    std::string last;
    for (; it != data_.end() && n < limit; ++it, ++n) {
        if (n) body += ',';
        append_json_string(body, it->first);
        last = it->first;
    }
    body += ']';
    if (it != data_.end()) {
        body += ",\"next\":";
        append_json_string(body, last);
    }
    body += "}\n";
    return http::response(http::status::ok, std::move(body), "application/json");
}

child_spec kv_child(kv_options o) {
    return {"kv",
            [o] {
                auto [tx, rx] = channel<kv_server::envelope>();
                if (!register_name(kv_name, tx))
                    throw std::runtime_error("kv: the name \"kv\" is held by a live actor");
                kv_server s(o);
                s.serve(std::move(rx));
            },
            restart_policy::permanent};
}

void add_kv_routes(http::router& r, const kv_options& o) {
    r.route<kv_server>(http::verb::get, "/kv", kv_name, o.call_timeout);
    r.route<kv_server>(http::verb::get, "/kv/{key}", kv_name, o.call_timeout);
    r.route<kv_server>(http::verb::put, "/kv/{key}", kv_name, o.call_timeout);
    r.route<kv_server>(http::verb::delete_, "/kv/{key}", kv_name, o.call_timeout);
}

}  // namespace smarm::services
