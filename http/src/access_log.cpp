// Request logging: see access_log.hpp.

#include "access_log.hpp"

#include <spdlog/async.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <stdexcept>
#include <string>

namespace smarm::http::internal {

namespace {

std::shared_ptr<spdlog::logger> stdout_access_logger() {
    static std::once_flag once;
    static std::shared_ptr<spdlog::logger> log;
    std::call_once(once, [] {
        // Asynchronous, and it drops the oldest lines rather than block a
        // scheduler thread when stdout cannot keep up.
        spdlog::init_thread_pool(8192, 1);
        log = std::make_shared<spdlog::async_logger>(
            "access", std::make_shared<spdlog::sinks::stdout_sink_mt>(), spdlog::thread_pool(),
            spdlog::async_overflow_policy::overrun_oldest);
        log->set_pattern("[%Y-%m-%dT%H:%M:%S.%e] %v");
    });
    return log;
}

}  // namespace

std::shared_ptr<spdlog::logger> open_access_log(const server_config& cfg) {
    if (cfg.access_log_file.empty()) return stdout_access_logger();
    std::shared_ptr<spdlog::sinks::sink> sink;
    try {
        sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(cfg.access_log_file);
    } catch (const spdlog::spdlog_ex& e) {
        throw std::runtime_error("smarm::http: cannot open the access log \"" +
                                 cfg.access_log_file + "\": " + e.what());
    }
    auto log = std::make_shared<spdlog::logger>("access", std::move(sink));
    log->set_pattern("[%Y-%m-%dT%H:%M:%S.%e] %v");
    log->flush_on(spdlog::level::warn);
    return log;
}

void log_access(spdlog::logger& log, const socket_address& peer, std::string_view method,
                std::string_view target, unsigned status, std::uint64_t bytes,
                std::chrono::nanoseconds took, std::string_view request_id) {
    log.info("{} \"{} {}\" {} {} {:.3f}ms {}", peer.to_string(), method, target, status, bytes,
             static_cast<double>(took.count()) / 1e6, request_id);
}

void log_handler_error(const socket_address& peer, const request& req, std::string_view what) {
    spdlog::error("http: request {} ({} {} from {}) failed: {}", req.id(), req.method_string(),
                  req.target(), peer.to_string(), what);
}

void log_stream_error(std::string_view what) {
    spdlog::error("http: a streamed response body failed: {}", what);
}

}  // namespace smarm::http::internal
