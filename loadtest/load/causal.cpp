// smarm-load --causal (causal.hpp): the admin-side exchange.

#include "causal.hpp"

#include <smarm/net.hpp>

#include <boost/json.hpp>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace smarm::load {

namespace {

/// Percent-encodes a form value ('+' stands for a space there).
std::string form_encode(std::string_view v) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : v) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == ',' ||
            c == '/') {
            out += static_cast<char>(c);
        } else if (c == ' ') {
            out += '+';
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

/// A name inside a single-quoted gnuplot string: quotes doubled, line
/// breaks dropped (gnuplot substitutes neither backquotes nor @macros in
/// single quotes: checked with gnuplot 5.4).
std::string gp_quote(std::string_view s) {
    std::string o = "'";
    for (char c : s) {
        if (c == '\'')
            o += "''";
        else if (c == '\n' || c == '\r')
            o += ' ';
        else
            o += c;
    }
    return o + "'";
}

std::string where(const target& t) {
    return t.host + ":" + std::to_string(t.port);
}

}  // namespace

admin_reply admin_call(const target& t, const std::string& token, const std::string& method,
                       const std::string& path, const std::string& form,
                       std::chrono::nanoseconds timeout) {
    tcp_stream s;
    try {
        s = tcp_stream::connect(t.host, t.port, std::chrono::seconds(5));
    } catch (const std::exception& e) {
        throw std::runtime_error("--causal: cannot reach the admin listener at " + where(t) + ": " +
                                 e.what());
    }
    std::string req =
        method + " " + path + " HTTP/1.1\r\nHost: " + t.host_header + "\r\nConnection: close\r\n";
    if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
    if (!form.empty())
        req += "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
               std::to_string(form.size()) + "\r\n";
    req += "\r\n" + form;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string in;
    try {
        s.write_all(req.data(), req.size(), timeout);
        // Connection: close: the answer is everything up to the end of the
        // stream (bounded: a profile's text is small).
        char buf[16 * 1024];
        for (;;) {
            const auto left = deadline - std::chrono::steady_clock::now();
            if (left <= std::chrono::nanoseconds::zero())
                throw std::runtime_error("no answer in time");
            const std::size_t n = s.read_some(buf, sizeof buf, left);
            if (n == 0) break;
            in.append(buf, n);
            if (in.size() > (64u << 20)) throw std::runtime_error("answer over 64 MiB");
        }
    } catch (const std::exception& e) {
        throw std::runtime_error("--causal: " + method + " " + path + " at " + where(t) + ": " +
                                 e.what());
    }
    const auto head_end = in.find("\r\n\r\n");
    if (in.compare(0, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos)
        throw std::runtime_error("--causal: " + where(t) + " did not answer HTTP/1.1");
    admin_reply r;
    r.status = static_cast<unsigned>(std::strtoul(in.c_str() + 9, nullptr, 10));
    r.body = in.substr(head_end + 4);
    return r;
}

causal_report profile_server(const causal_options& o, std::chrono::nanoseconds length) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(length).count();
    const std::string rank = form_encode(o.throughput_point + "," + o.latency_point);
    std::string form = "duration=" + std::to_string(ms) + "ms&speedups=" + form_encode(o.speedups) +
                       "&window_ms=" + std::to_string(o.window.count()) + "&rank=" + rank +
                       "&points=" + form_encode(o.throughput_point) + "&format=ranking";
    if (!o.sites.empty()) form += "&sites=" + form_encode(o.sites);
    // The run takes about `length`; thin windows double, so allow for more.
    const auto run_timeout = length * 3 + std::chrono::seconds(30);
    const admin_reply run =
        admin_call(o.admin, o.token, "POST", "/debug/causal", form, run_timeout);
    if (run.status != 200)
        throw std::runtime_error("--causal: POST /debug/causal answered " +
                                 std::to_string(run.status) + ": " + run.body);
    causal_report r;
    r.rankings = run.body;
    auto last = [&](const std::string& query) {
        const admin_reply a = admin_call(o.admin, o.token, "GET", "/debug/causal/last?" + query, {},
                                         std::chrono::seconds(30));
        if (a.status != 200)
            throw std::runtime_error("--causal: GET /debug/causal/last?" + query + " answered " +
                                     std::to_string(a.status) + ": " + a.body);
        return a.body;
    };
    if (!o.coz_file.empty()) r.coz = last("format=coz");
    if (!o.plot_file.empty()) r.plot_script = plot_script(o, last("format=json"));
    return r;
}

std::string plot_script(const causal_options& o, const std::string& profile_json) {
    const bool png = o.plot_file.ends_with(".png");
    if (!png && !o.plot_file.ends_with(".svg"))
        throw std::runtime_error("--causal-plot \"" + o.plot_file + "\": use a .png or .svg name");
    // site -> point -> (speedup, impact) from the profile's cells. The script
    // is written here, from numbers: never run a script a server sent.
    std::map<std::string, std::map<std::string, std::vector<std::pair<double, double>>>> curves;
    std::vector<std::string> order;
    try {
        const auto doc = boost::json::parse(profile_json);
        for (const auto& cell : doc.at("cells").as_array()) {
            const auto& c = cell.as_object();
            const std::string site(c.at("site").as_string());
            if (!curves.count(site)) order.push_back(site);
            auto& by_point = curves[site];
            for (const auto& [name, v] : c.at("points").as_object()) {
                const auto& im = v.as_object().at("impact_pct");
                if (im.is_null()) continue;
                by_point[std::string(name)].emplace_back(c.at("speedup").to_number<double>(),
                                                         im.to_number<double>());
            }
        }
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("--causal: the profile's JSON: ") + e.what());
    }
    std::ostringstream g;
    g << (png ? "set terminal pngcairo size 1400,520\n" : "set terminal svg size 1400,520\n")
      << "set output " << gp_quote(o.plot_file) << "\n"
      << "set multiplot layout 1,2\nset grid\nset key left top noenhanced\n"
      << "set xlabel 'site speedup (%)'\nset xrange [0:*]\n";
    std::size_t block = 0;
    for (const auto& [point, label] : {std::pair{o.throughput_point, "throughput higher by (%)"},
                                       std::pair{o.latency_point, "mean latency shorter by (%)"}}) {
        g << "set title " << gp_quote(point) << " noenhanced\nset ylabel '" << label << "'\n";
        std::vector<std::string> lines;
        for (const std::string& site : order) {
            auto it = curves[site].find(point);
            if (it == curves[site].end() || it->second.empty()) continue;
            const std::string data = "$d" + std::to_string(block++);
            g << data << " << EOD\n";
            for (const auto& [x, y] : it->second)
                g << x << " " << y << "\n";
            g << "EOD\n";
            lines.push_back(data + " using 1:2 with linespoints lw 2 title " + gp_quote(site));
        }
        g << "plot ";
        if (lines.empty()) g << "0 title 'no measurement'";
        for (std::size_t i = 0; i < lines.size(); ++i)
            g << (i ? ", " : "") << lines[i];
        g << "\n";
    }
    g << "unset multiplot\n";
    return g.str();
}

void write_causal_files(const causal_options& o, const causal_report& r) {
    auto write = [](const std::string& path, const std::string& text) {
        std::ofstream f(path);
        if (!(f << text)) throw std::runtime_error("--causal: cannot write " + path);
    };
    if (!o.coz_file.empty()) write(o.coz_file, r.coz);
    if (!o.plot_file.empty()) {
        const std::string script = o.plot_file + ".gp";
        write(script, r.plot_script);
        struct remove_after {
            const std::string& path;
            ~remove_after() { std::remove(path.c_str()); }
        } const gone{script};
        run_gnuplot(script);
    }
}

}  // namespace smarm::load
