#pragma once
// smarm-load's request mix: which requests to send and in what proportion.
//
// A scenario file (YAML):
//
//   requests:
//     - name: read            # label in the report (default: METHOD path)
//       weight: 90            # relative frequency (default 1)
//       method: GET           # default GET
//       path: /kv/key-{random:1000}
//     - name: write
//       weight: 10
//       method: PUT
//       path: /kv/key-{random:1000}
//       body: {size: 256}             # or {min: 64, max: 4096} (uniform)
//       headers: {Content-Type: application/octet-stream}
//
// Path tokens: {random:N} a uniform integer in [0, N); {seq} the connection's
// request counter; {conn} the connection's index. Anything else in braces is
// an error naming the token. Bodies are filler bytes of the drawn size.

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace smarm::load {

class scenario_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// One piece of a path template: literal text or a token.
struct path_piece {
    enum kind_t { literal, random, seq, conn } kind = literal;
    std::string text;     // literal
    std::uint64_t n = 0;  // random: the bound
};

struct request_template {
    std::string name;
    std::uint64_t weight = 1;
    std::string method = "GET";
    std::string path_text;  ///< the template as written
    std::vector<path_piece> path;
    std::vector<std::pair<std::string, std::string>> headers;
    std::uint64_t body_min = 0, body_max = 0;  // uniform in [min, max]
    bool has_body() const { return body_max > 0 || method == "POST" || method == "PUT"; }
};

/// Parses a path template ("/kv/{random:100}"); throws scenario_error.
std::vector<path_piece> parse_path(const std::string& path);

class scenario {
  public:
    /// A single request repeated (the command-line form).
    static scenario single(std::string method, const std::string& path, std::uint64_t body_size,
                           std::vector<std::pair<std::string, std::string>> headers);
    /// Reads a scenario file; errors name the file, the entry and the key.
    static scenario from_file(const std::string& file);
    static scenario from_yaml(const std::string& text, const std::string& origin);

    const std::vector<request_template>& requests() const { return reqs_; }
    /// True when every request is the same bytes each time (pre-rendered).
    bool is_fixed() const;
    /// Draws a request index by weight.
    std::size_t pick(std::mt19937_64& rng) const;
    /// Writes request `i` (HTTP/1.1 to `host`) into `out`.
    void render(std::size_t i, std::mt19937_64& rng, std::uint64_t seq, std::uint64_t conn,
                const std::string& host_header, bool close, std::string& out) const;

  private:
    void finish();
    std::vector<request_template> reqs_;
    std::vector<std::uint64_t> cumulative_;
};

}  // namespace smarm::load
