#include "kv.hpp"

#include <smarm/causal.hpp>

#include "json.hpp"

#include <smarm/io.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <system_error>

namespace smarm::services {

namespace {

/// Runs a log operation on the blocking pool: nullopt when it succeeded,
/// else why it failed (logged). One that takes a second or more is logged
/// as a warning naming it (`what`), the log and `who` waited for it: a slow
/// disk is named, not only seen as timeouts.
template <class F>
std::optional<std::string> on_disk(const char* what, const std::string& path, const char* who,
                                   F&& op) {
    const auto start = std::chrono::steady_clock::now();
    std::optional<std::string> why;
    try {
        smarm::block_on_io([&] { op(); });
    } catch (const std::system_error& e) {
        spdlog::error("kv: {}", e.what());
        why = e.code().message();
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (took >= std::chrono::seconds(1))
        spdlog::warn("kv: {} to {} took {:.2f} s; {} waited for it", what, path, took.count(), who);
    return why;
}

}  // namespace

kv_server::kv_server(kv_options o) : opts_(std::move(o)) {
    if (opts_.log_path.empty()) return;
    log_ = smarm::block_on_io([this] {
        return std::make_shared<kv_log>(opts_.log_path, opts_.sync, opts_.compact_bytes, data_);
    });
}

const std::string* kv_server::current(std::string_view key) const {
    if (auto s = staged_.find(key); s != staged_.end()) return s->second ? &*s->second : nullptr;
    auto it = data_.find(key);
    return it == data_.end() ? nullptr : &it->second;
}

http::response kv_server::handle_call(http::request req) {
    if (req.route() == "/kv") return list(req);
    switch (req.method()) {
        case http::verb::get:
        case http::verb::head: {
            // What is acknowledged, never a write still waiting for its sync.
            auto it = data_.find(req.param("key").value_or(""));
            if (it == data_.end()) return http::response(http::status::not_found, "no such key\n");
            return http::response(http::status::ok, it->second, "application/octet-stream");
        }
        case http::verb::put:
        case http::verb::delete_: {
            if (syncing_) {  // after the running group's sync (kv.hpp)
                held_.emplace_back(std::move(req), defer_reply());
                return http::response();  // discarded
            }
            auto [answer, staged] = write(req);
            if (!staged) return answer;
            answer_after_sync(defer_reply(), std::move(answer));
            return http::response();  // discarded: the answer goes out after the sync
        }
        default:
            return http::response(http::status::method_not_allowed, "method not allowed\n");
    }
}

std::pair<http::response, bool> kv_server::write(http::request& req) {
    std::string key(req.param("key").value_or(""));
    if (req.method() == http::verb::put) {
        if (req.body().size() > opts_.value_limit)
            return {http::response(
                        http::status::payload_too_large,
                        "value larger than " + std::to_string(opts_.value_limit) + " bytes\n"),
                    false};
        if (auto why = logged("a write", [&] { log_->put(key, req.body()); }))
            return {storage_failed(*why), false};
        const auto answer =
            current(key) == nullptr ? http::status::created : http::status::no_content;
        if (staging()) {
            staged_.insert_or_assign(std::move(key), std::move(req.body()));
            return {http::response(answer), true};
        }
        {
            auto site = SMARM_CAUSAL_SITE("kv.map");
            data_.insert_or_assign(std::move(key), std::move(req.body()));
            compact();
        }
        return {http::response(answer), false};
    }
    if (current(key) == nullptr)
        return {http::response(http::status::not_found, "no such key\n"), false};
    if (auto why = logged("a write", [&] { log_->erase(key); }))
        return {storage_failed(*why), false};
    if (staging()) {
        staged_.insert_or_assign(std::move(key), std::nullopt);
        return {http::response(http::status::no_content), true};
    }
    {
        auto site = SMARM_CAUSAL_SITE("kv.map");
        data_.erase(key);
        compact();
    }
    return {http::response(http::status::no_content), false};
}

void kv_server::answer_after_sync(reply_to<http::response> to, http::response r) {
    unsynced_.emplace_back(std::move(to), std::move(r));
    if (!group_armed_) {
        group_armed_ = true;
        arm_after(opts_.group_interval, 1);
    }
}

void kv_server::handle_timer(std::uint64_t) {
    group_armed_ = false;
    in_sync_ = std::move(unsynced_);
    unsynced_.clear();
    in_sync_staged_ = std::move(staged_);
    staged_.clear();
    syncing_ = true;
    auto sync_here = [this] { finish_group(logged("a group sync", [this] { log_->sync(); })); };
    if (!self_) return sync_here();  // no inbox to be told through
    // The sync actor holds the log (not the server): a server stopped
    // meanwhile frees nothing the sync still uses, and its report then
    // goes to a closed inbox.
    auto sync = [log = log_, to = self_, path = opts_.log_path] {
        (void)to.send(kv_group_synced{
            on_disk("a group sync", path, "the group's writes", [&] { log->sync(); })});
    };
    try {
        (void)spawn(std::move(sync));
    } catch (const spawn_error& e) {  // no actor to spare: the server waits instead
        spdlog::warn("kv: the group sync runs in the server ({})", e.what());
        sync_here();
    }
}

void kv_server::handle_info(kv_group_synced done) {
    finish_group(done.error);
}

void kv_server::finish_group(const std::optional<std::string>& error) {
    syncing_ = false;
    auto batch = std::move(in_sync_);
    in_sync_.clear();
    auto staged = std::move(in_sync_staged_);
    in_sync_staged_.clear();
    if (error) {
        // The log has cut the group's records: none of them is stored.
        for (auto& [to, r] : batch)
            (void)to.send(storage_failed(*error));
    } else {
        for (auto& [k, v] : staged) {
            if (v)
                data_.insert_or_assign(k, std::move(*v));
            else
                data_.erase(k);
        }
        compact();
        for (auto& [to, r] : batch)
            (void)to.send(std::move(r));
    }
    // The writes held during the sync, in their order, into the next group.
    auto held = std::move(held_);
    held_.clear();
    for (auto& [req, to] : held) {
        auto [answer, staged_now] = write(req);
        if (staged_now)
            answer_after_sync(std::move(to), std::move(answer));
        else
            (void)to.send(std::move(answer));
    }
}

http::response kv_server::storage_failed(const std::string& why) const {
    // Normally the log has put itself back as it was: the write is not
    // stored. If it could not, the write may reappear after a restart.
    const bool unknown = log_ && log_->damaged();
    return http::response(http::status::service_unavailable,
                          unknown ? "storage failed; the log is damaged, so this write may or may "
                                    "not be found after a restart: " +
                                        why + "\n"
                                  : "storage failed; not stored: " + why + "\n");
}

template <class F>
std::optional<std::string> kv_server::logged(const char* what, F&& write) {
    if (!log_) return std::nullopt;
    // On-CPU only: the pool thread's write and fsync are outside the site
    // (the causal profiler's IO rule; README "Causal profiling").
    auto site = SMARM_CAUSAL_SITE("kv.log");
    return on_disk(what, opts_.log_path, "every kv request", std::forward<F>(write));
}

void kv_server::compact() {
    if (!log_ || log_->size() < opts_.compact_bytes) return;
    try {
        smarm::block_on_io([this] { log_->maybe_compact(data_); });
    } catch (const std::system_error& e) {
        spdlog::error("kv: compaction failed: {}", e.what());
    }
}

http::response kv_server::list(const http::request& req) const {
    std::size_t limit = 100;
    if (auto l = req.query_param("limit")) {
        std::size_t v = 0;
        auto r = std::from_chars(l->data(), l->data() + l->size(), v);
        if (r.ec != std::errc() || r.ptr != l->data() + l->size() || v == 0 || v > 1000)
            return http::response(http::status::bad_request, "limit must be 1..1000\n");
        limit = v;
    }
    auto it = data_.begin();
    if (auto after = req.query_param("after")) it = data_.upper_bound(*after);
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

namespace {

/// Errors that can clear on their own (descriptors, memory, disk space,
/// a flaky device): worth retrying. Anything else (a missing directory,
/// permissions) needs an operator.
bool transient(const std::error_code& e) {
    switch (static_cast<std::errc>(e.value())) {
        case std::errc::too_many_files_open:
        case std::errc::too_many_files_open_in_system:
        case std::errc::not_enough_memory:
        case std::errc::no_space_on_device:
        case std::errc::io_error:
        case std::errc::interrupted:
        case std::errc::resource_unavailable_try_again:
            return true;
        default:
            return false;
    }
}

}  // namespace

child_spec kv_child(kv_options o) {
    return {"kv",
            [o] {
                // The log is opened (and replayed) before the name is taken:
                // until then kv requests are answered 503 at once, instead
                // of queueing behind a replay or a retry.
                std::optional<kv_server> s;
                for (auto pause = std::chrono::milliseconds(50);;
                     pause = std::min(pause * 2, std::chrono::milliseconds(5000))) {
                    try {
                        s.emplace(o);
                        break;
                    } catch (const std::system_error& e) {
                        if (!transient(e.code())) throw;
                        spdlog::error("kv: cannot open the log ({}); retrying in {} ms", e.what(),
                                      pause.count());
                        smarm::sleep(pause);
                    }
                }
                auto [tx, rx] = channel<kv_server::envelope>();
                s->set_inbox(tx);
                if (!register_name(kv_name, tx))
                    throw std::runtime_error("kv: the name \"kv\" is held by a live actor");
                s->serve(std::move(rx));
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
