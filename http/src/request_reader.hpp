#pragma once
// Beast's HTTP/1 request parser (basic_parser: framing, the header and body
// limits, chunked decoding, Content-Length / Transfer-Encoding checks)
// delivering straight into an http::request. Beast's own request_parser
// builds a beast::http::message (an allocated, tree-indexed node per field)
// that the connection then copied field by field into the request and
// searched four times for Host, Transfer-Encoding and Expect: a third of the
// request path's instructions for a small request. Here each field is copied
// once, and the facts the connection validates are noted on the way.
//
// One reader per request, like any Beast parser; the request it fills may
// be reused across a connection's requests (request_access::reset).
//
// Beast's body_limit counts only data bytes and its header_limit only the
// head: chunk extensions and trailer fields count against nothing. Here
// they each count against framing_limit (the header limit): a request whose
// chunk extensions pass it fails with bad_chunk_extension (400), one whose
// trailers pass it with header_limit (431). Trailer fields are counted and
// dropped, never merged into the headers (a trailer must not be able to
// pose as a header the connection already validated). The buffer holding a
// line not yet complete is bounded by the connection (its read buffer's
// maximum size).

#include <smarm/http/message.hpp>

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "request_access.hpp"

namespace smarm::http::internal {

class request_reader final : public boost::beast::http::basic_parser<true> {
  public:
    /// Parses into `r`, which must be empty: freshly constructed or
    /// cleared by request_access::reset (fields are appended to it).
    explicit request_reader(request& r) : r_(r) {}

    /// The most bytes of chunk extensions, and separately of trailer
    /// fields, one request may send (default: unlimited).
    void framing_limit(std::size_t n) noexcept { framing_limit_ = n; }

    /// Where body bytes go from now on instead of the request's body (a
    /// streamed body, body_source.hpp): appended, nothing reserved.
    void sink(std::string* s) noexcept { sink_ = s; }

    /// How many Host fields the header had.
    unsigned host_count() const noexcept { return hosts_; }
    /// Whether any Transfer-Encoding field was present (basic_parser
    /// accepts only a final "chunked"; anything else it leaves to us).
    bool has_transfer_encoding() const noexcept { return transfer_encoding_; }
    /// The first Expect field's value, if any.
    const std::string* expect() const noexcept {
        return expect_ < 0 ? nullptr
                           : &request_access::headers(r_)[static_cast<std::size_t>(expect_)].value;
    }

  private:
    using string_view = boost::beast::string_view;
    using error_code = boost::beast::error_code;

    void on_request_impl(verb method, string_view method_str, string_view target, int version,
                         error_code&) override {
        request_access::method(r_) = method;
        request_access::method_string(r_).assign(method_str.data(), method_str.size());
        request_access::target(r_).assign(target.data(), target.size());
        request_access::version(r_) = static_cast<unsigned>(version);
    }
    void on_response_impl(int, string_view, int, error_code&) override {}  // requests only

    void on_field_impl(field name, string_view name_string, string_view value,
                       error_code& ec) override {
        if (header_done_) {  // a trailer field: counted, then dropped
            trailer_bytes_ += name_string.size() + value.size() + 4;  // ": " and CRLF
            if (trailer_bytes_ > framing_limit_) ec = boost::beast::http::error::header_limit;
            return;
        }
        auto& hs = request_access::headers(r_);
        if (name == field::host) {
            ++hosts_;
        } else if (name == field::transfer_encoding) {
            transfer_encoding_ = true;
        } else if (name == field::expect && expect_ < 0) {
            expect_ = static_cast<long>(hs.size());
        }
        if (hs.empty()) hs.reserve(8);  // most requests: one allocation, no regrowth
        hs.push_back({std::string(name_string.data(), name_string.size()),
                      std::string(value.data(), value.size())});
    }
    void on_header_impl(error_code&) override { header_done_ = true; }

    void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code& ec) override {
        if (sink_ != nullptr) return;  // streamed: the length may be far past what is held
        std::string& body = r_.body();
        body.clear();
        if (!length) return;
        // basic_parser has already held Content-Length to the body limit.
        if (*length > body.max_size()) {
            ec = boost::beast::http::error::buffer_overflow;
            return;
        }
        body.reserve(static_cast<std::size_t>(*length));
    }
    std::size_t on_body_impl(string_view piece, error_code& ec) override {
        return append(piece, ec);
    }
    void on_chunk_header_impl(std::uint64_t, string_view extensions, error_code& ec) override {
        extension_bytes_ += extensions.size();
        if (extension_bytes_ > framing_limit_) ec = boost::beast::http::error::bad_chunk_extension;
    }
    std::size_t on_chunk_body_impl(std::uint64_t, string_view piece, error_code& ec) override {
        return append(piece, ec);
    }
    void on_finish_impl(error_code&) override {}

    std::size_t append(string_view piece, error_code& ec) {
        std::string& body = sink_ != nullptr ? *sink_ : r_.body();
        if (piece.size() > body.max_size() - body.size()) {
            ec = boost::beast::http::error::buffer_overflow;
            return 0;
        }
        body.append(piece.data(), piece.size());
        return piece.size();
    }

    request& r_;
    std::string* sink_ = nullptr;
    unsigned hosts_ = 0;
    bool transfer_encoding_ = false;
    long expect_ = -1;  // index into the request's headers
    bool header_done_ = false;
    std::size_t framing_limit_ = static_cast<std::size_t>(-1);
    std::size_t extension_bytes_ = 0;
    std::size_t trailer_bytes_ = 0;
};

}  // namespace smarm::http::internal
