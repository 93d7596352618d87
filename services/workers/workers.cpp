#include "workers.hpp"

#include <smarm/causal.hpp>

#include <openssl/evp.h>

#include <memory>
#include <stdexcept>

namespace smarm::services {

namespace {

std::string hex_of(const unsigned char* md, unsigned len) {
    static const char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * len);
    for (unsigned i = 0; i < len; ++i) {
        out += hex[md[i] >> 4];
        out += hex[md[i] & 15];
    }
    return out;
}

/// POST /upload/sha256: the body hashed piece by piece as it arrives.
http::response upload_sha256(http::request& req) {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                                 EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("sha256: EVP_DigestInit_ex failed");
    std::uint64_t bytes = 0;
    for (std::string piece = req.read_body(); !piece.empty(); piece = req.read_body()) {
        if (EVP_DigestUpdate(ctx.get(), piece.data(), piece.size()) != 1)
            throw std::runtime_error("sha256: EVP_DigestUpdate failed");
        bytes += piece.size();
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx.get(), md, &len) != 1)
        throw std::runtime_error("sha256: EVP_DigestFinal_ex failed");
    return http::response(http::status::ok, hex_of(md, len) + " " + std::to_string(bytes) + "\n");
}

}  // namespace

std::string sha256_hex(std::string_view data) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("sha256: EVP_Digest failed");
    return hex_of(md, len);
}

std::vector<child_spec> worker_children(const workers_options& o) {
    std::vector<child_spec> out;
    for (std::uint64_t i = 0; i < o.count; ++i)
        out.push_back({"worker-" + std::to_string(i),
                       [] {
                           auto [tx, rx] = channel<work_request>();
                           join(workers_group, tx);
                           while (auto job = rx.recv()) {
                               std::string digest;
                               {
                                   auto site = SMARM_CAUSAL_SITE("workers.sha256");
                                   digest = sha256_hex(job->body);
                               }
                               (void)job->reply.send(std::move(digest));
                               check();  // a long queue stays preemptible and stoppable
                           }
                       },
                       restart_policy::permanent});
    return out;
}

void add_worker_routes(http::router& r, const workers_options& o) {
    r.post("/work/sha256", [o](http::request& req) {
        const std::size_t n = members(workers_group).size();
        for (std::size_t k = 0; k < n; ++k) {
            auto picked = pick_member(workers_group);
            if (!picked) break;
            sender<work_request>& inbox = picked->inbox;
            if (inbox.queued() >= o.queue_limit) continue;  // that one is behind
            auto [tx, rx] = channel<std::string>();
            auto sent = inbox.send(work_request{std::move(req.body()), std::move(tx)});
            if (!sent.ok()) {  // it ended meanwhile: the body comes back, try the next
                req.body() = std::move(sent.returned->body);
                continue;
            }
            auto r = rx.recv_timeout(o.call_timeout);
            if (r) return http::response(http::status::ok, *r.value + "\n");
            if (r.status == recv_status::timeout)
                return http::response(http::status::gateway_timeout, "worker too slow\n");
            return http::response(http::status::service_unavailable, "worker died\n");
        }
        http::response busy(http::status::service_unavailable, "all workers are busy\n");
        busy.set("Retry-After", "1");
        return busy;
    });
    r.post("/upload/sha256", upload_sha256, http::streamed_body{o.upload_limit});
}

}  // namespace smarm::services
