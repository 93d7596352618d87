#pragma once
// Response heads (response_head.cpp): what the connection loop writes
// before a body. The Date value is cached for its second (a seqlock of
// atomics: a response copies 29 bytes instead of formatting a time).

#include <smarm/http/config.hpp>
#include <smarm/http/message.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace smarm::http::internal {

/// How one response goes on the wire, beyond the response itself.
struct framing {
    std::optional<std::uint64_t> content_length;  ///< nullopt: no Content-Length
    bool chunked = false;                         ///< Transfer-Encoding: chunked
    bool keep_alive = true;                       ///< false: Connection: close
    unsigned request_version = 11;                ///< 10: keep-alive is said explicitly
};

/// Appends the status line and the managed headers (Server, Date,
/// Content-Type, Content-Length or Transfer-Encoding, Connection), the
/// response's own headers and the blank line.
void append_head(std::string& out, const server_config& cfg, const response& r, const framing& f);
/// Writes the head (as append_head) at `p` when the most it can take fits
/// in `cap` bytes; returns its end, or nullptr (nothing written).
char* put_head(char* p, std::size_t cap, const server_config& cfg, const response& r,
               const framing& f);
/// A complete short response with a text body ("413 Payload Too Large\n").
void append_simple(std::string& out, const server_config& cfg, http::status s, bool keep_alive,
                   unsigned request_version);
/// Writes the current Date value (29 characters, from the cache) at `p`;
/// returns its end.
char* write_date(char* p);
/// A chunk-size line ("1a\r\n").
void append_chunk_size(std::string& out, std::size_t n);

}  // namespace smarm::http::internal
