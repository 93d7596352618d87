#pragma once
// The connection's side of a streamed request body (request::read_body on
// a route added with http::streamed_body). The base hands out what its
// source last produced, at most what each read asks for; a source only
// produces the next piece: HTTP/1.1 parses on from the connection's socket
// through the request's own parser (connection.hpp's h1_body); HTTP/2
// takes the DATA the connection received (h2_session.cpp's h2_body),
// which gives the stream's window back only as the handler reads.

#include <smarm/http/message.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>

namespace smarm::http::internal {

class body_source {
  public:
    virtual ~body_source() = default;
    /// Appends at most `max` (> 0) bytes of the body to `out`, parking
    /// until some arrive; false (nothing appended) at the body's end.
    /// Throws body_error when the body cannot be read on (again on every
    /// later read).
    bool read(std::string& out, std::size_t max) {
        while (off_ == piece_.size()) {
            if (failed_) throw body_error(*failed_, "the request body was cut short");
            piece_.clear();
            off_ = 0;
            if (!next(piece_)) return false;
        }
        const std::size_t n = std::min(max, piece_.size() - off_);
        out.append(piece_, off_, n);
        off_ += n;
        return true;
    }

  protected:
    /// Appends the body's next bytes to `piece` (empty), parking until some
    /// arrive (appending none is fine: read() asks again); false at the
    /// body's end. A failure goes through fail().
    virtual bool next(std::string& piece) = 0;
    [[noreturn]] void fail(http::status s, const std::string& why) {
        failed_ = s;
        throw body_error(s, why);
    }
    /// Whether everything next() produced has been read.
    bool drained() const noexcept { return off_ == piece_.size(); }

  private:
    std::string piece_;
    std::size_t off_ = 0;
    std::optional<http::status> failed_;
};

}  // namespace smarm::http::internal
