#pragma once
// smarm_test::memory_stream: the HTTP connection loop's stream contract
// over memory. Reads come from a string in pieces of at most `max_read`
// bytes (so a request can be split anywhere), writes append to `out`,
// deadlines are ignored. The fuzz target, smarm-http-micro and white-box
// tests run smarm::http's connection<Stream> over it.

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "stream.hpp"  // smarm_http_internal: throwing_io, error_code, time_point

namespace smarm_test {

namespace http = smarm::http;

class memory_stream : public http::internal::throwing_io<memory_stream> {
  public:
    using error_code = http::internal::error_code;
    using throwing_io::read_some;
    using throwing_io::write_some;
    explicit memory_stream(std::string_view in, std::size_t max_read = 4096)
        : in_(in), max_read_(max_read) {}

    void set_deadline(std::optional<http::internal::time_point>) noexcept {}

    template <class Buffers>
    std::size_t read_some(const Buffers& bufs, error_code& ec) {
        ec = {};
        if (in_.empty()) {
            ec = boost::asio::error::eof;
            return 0;
        }
        std::size_t total = 0;
        for (auto it = boost::asio::buffer_sequence_begin(bufs);
             it != boost::asio::buffer_sequence_end(bufs) && !in_.empty() && total < max_read_;
             ++it) {
            boost::asio::mutable_buffer b = *it;
            std::size_t n = std::min({b.size(), in_.size(), max_read_ - total});
            std::memcpy(b.data(), in_.data(), n);
            in_.remove_prefix(n);
            total += n;
        }
        return total;
    }
    template <class Buffers>
    std::size_t write_some(const Buffers& bufs, error_code& ec) {
        ec = {};
        std::size_t total = 0;
        for (auto it = boost::asio::buffer_sequence_begin(bufs);
             it != boost::asio::buffer_sequence_end(bufs); ++it) {
            boost::asio::const_buffer b = *it;
            out.append(static_cast<const char*>(b.data()), b.size());
            total += b.size();
        }
        return total;
    }
    bool write_all(std::string_view data) {
        out.append(data);
        return true;
    }
    void linger() noexcept {}

    std::string out;

  private:
    std::string_view in_;
    std::size_t max_read_;
};

}  // namespace smarm_test
