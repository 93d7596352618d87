#pragma once
// Request logging (access_log.cpp): the access logger a server opens at
// start (stdout, asynchronous and dropping the oldest lines under
// overload, or an appended file), its line format, and the error lines for
// failed handlers and streamed bodies.

#include <smarm/http/config.hpp>
#include <smarm/http/message.hpp>
#include <smarm/net.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

namespace spdlog {
class logger;
}

namespace smarm::http::internal {

/// The logger for cfg.access_log_file ("" = the shared stdout logger).
/// Throws std::runtime_error naming the file when it cannot be opened.
std::shared_ptr<spdlog::logger> open_access_log(const server_config& cfg);
/// One access line: peer, method, target, status, body bytes, duration,
/// request id.
void log_access(spdlog::logger& log, const socket_address& peer, std::string_view method,
                std::string_view target, unsigned status, std::uint64_t bytes,
                std::chrono::nanoseconds took, std::string_view request_id);
/// A handler that threw (answered 500).
void log_handler_error(const socket_address& peer, const request& req, std::string_view what);
/// A streamed body whose generator threw after its head was sent.
void log_stream_error(std::string_view what);

}  // namespace smarm::http::internal
