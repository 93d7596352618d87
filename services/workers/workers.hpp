#pragma once
// The workers service: a pool of actors in the process group "workers",
// doing CPU work off the connection actors. POST /work/sha256 answers the
// hex SHA-256 of the request body (OpenSSL).
//
// Dispatch goes round robin over the live members, skipping a worker whose
// mailbox already holds queue_limit requests; when every worker is that far
// behind the request is refused with 503 and Retry-After (load shedding:
// the queue never grows without bound). A worker that dies is evicted from
// the group and restarted by its supervisor.
//
// POST /upload/sha256 answers "<hex SHA-256> <bytes>" of a body of up to
// upload_limit bytes, hashed as it arrives (http::streamed_body) in the
// request's own actor: an upload of any size holds one piece at a time.

#include <smarm/channel.hpp>
#include <smarm/http/router.hpp>
#include <smarm/pg.hpp>
#include <smarm/supervisor.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace smarm::services {

struct workers_options {
    std::uint64_t count = 2;         ///< workers in the pool
    std::uint64_t queue_limit = 16;  ///< waiting requests per worker before 503 (0: refuse all)
    std::chrono::nanoseconds call_timeout = std::chrono::seconds(10);  ///< else 504
    std::uint64_t upload_limit = std::uint64_t{1} << 30;  ///< /upload/sha256's body (else 413)
};

/// One unit of work: the bytes to hash and where the answer goes.
struct work_request {
    std::string body;
    sender<std::string> reply;  ///< receives the lower-case hex digest
};

inline constexpr group<work_request> workers_group{"workers"};

/// The hex SHA-256 of `data`.
std::string sha256_hex(std::string_view data);

/// Supervisor children, one per worker ("worker-0", ...).
std::vector<child_spec> worker_children(const workers_options& o);

/// Adds POST /work/sha256 and POST /upload/sha256 to `r`.
void add_worker_routes(http::router& r, const workers_options& o);

}  // namespace smarm::services
