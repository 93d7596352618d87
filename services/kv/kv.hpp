#pragma once
// The kv service: a gen_server holding keys and values, reached over HTTP
// through registry-routed routes (the server's call type is http::request).
//
//   GET    /kv/{key}   200 with the stored bytes, or 404
//   PUT    /kv/{key}   201 when new, 204 when replaced; 413 past value_limit
//   DELETE /kv/{key}   204, or 404
//   GET    /kv         the keys in order, paginated: ?limit=N (default 100,
//                      at most 1000) &after=KEY; JSON {"keys":[...],"next":K}
//                      where "next" (present when more remain) is the
//                      `after` of the following page
//
// Run it as a supervised child (kv_child) so a crash restarts it; while it
// is down, its routes answer 503 (the router's registry-routed handling).

#include <smarm/gen_server.hpp>
#include <smarm/http/message.hpp>
#include <smarm/http/router.hpp>
#include <smarm/supervisor.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace smarm::services {

struct kv_options {
    std::uint64_t value_limit = 1024 * 1024;  ///< bytes per value (else 413)
    std::chrono::nanoseconds call_timeout = std::chrono::seconds(2);  ///< per request
};

class kv_server : public gen_server<http::request, http::response> {
  public:
    explicit kv_server(kv_options o) : opts_(o) {}
    http::response handle_call(http::request req) override;
    std::size_t size() const noexcept { return data_.size(); }

  private:
    http::response list(const http::request& req) const;
    kv_options opts_;
    std::map<std::string, std::string, std::less<>> data_;
};

/// The name the kv server registers its inbox under.
inline constexpr name<kv_server::envelope> kv_name{"kv"};

/// A supervisor child running the kv server under kv_name.
child_spec kv_child(kv_options o);

/// Adds the kv routes to `r`.
void add_kv_routes(http::router& r, const kv_options& o);

}  // namespace smarm::services
