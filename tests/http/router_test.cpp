// The router alone: specificity, 404/405, HEAD, decoding, and that the
// all-literal fast path agrees with the full scan.
#include <smarm/http/router.hpp>

#include "request_access.hpp"

#include <gtest/gtest.h>

#include <string>

namespace http = smarm::http;
using http::request_access;

namespace {

http::request make(http::verb v, std::string target) {
    http::request r;
    request_access::method(r) = v;
    request_access::target(r) = std::move(target);
    return r;
}

// The body of the handler that matched ("404" / "405 <Allow>" otherwise).
std::string route(const http::router& rt, http::verb v, std::string target) {
    auto req = make(v, std::move(target));
    auto m = rt.match(req);
    if (!m.target) {
        std::string out = std::to_string(static_cast<unsigned>(m.status));
        if (!m.allow.empty()) out += " " + m.allow;
        return out;
    }
    return (*m.target)(req).body();
}

http::handler says(std::string what) {
    return [what](http::request& q) {
        std::string out = what;
        if (auto p = q.param("id")) out += " id=" + std::string(*p);
        if (!q.wildcard().empty()) out += " rest=" + q.wildcard();
        return http::response(http::status::ok, out + " route=" + q.route());
    };
}

}  // namespace

TEST(Router, LiteralBeatsParamBeatsWildcardWhateverTheOrderAdded) {
    for (int order = 0; order < 2; ++order) {
        http::router rt;
        if (order == 0) {
            rt.get("/u/*", says("wild"));
            rt.get("/u/{id}", says("param"));
            rt.get("/u/me", says("literal"));
            rt.get("/u", says("bare"));
        } else {
            rt.get("/u", says("bare"));
            rt.get("/u/me", says("literal"));
            rt.get("/u/{id}", says("param"));
            rt.get("/u/*", says("wild"));
        }
        SCOPED_TRACE(order);
        EXPECT_EQ(route(rt, http::verb::get, "/u/me"), "literal route=/u/me");
        EXPECT_EQ(route(rt, http::verb::get, "/u/7"), "param id=7 route=/u/{id}");
        EXPECT_EQ(route(rt, http::verb::get, "/u/7/x"), "wild rest=7/x route=/u/*");
        // "/u/*" also matches "/u" with an empty rest; the exact route wins.
        EXPECT_EQ(route(rt, http::verb::get, "/u"), "bare route=/u");
        // The same through the full scan (an escaped path skips the
        // all-literal lookup).
        EXPECT_EQ(route(rt, http::verb::get, "/%75"), "bare route=/u");
        EXPECT_EQ(route(rt, http::verb::get, "/u/%6De"), "literal route=/u/me");
    }
}

TEST(Router, MethodsHeadAnd405) {
    http::router rt;
    rt.get("/a", says("get"));
    rt.put("/a", says("put"));
    rt.post("/{id}", says("post"));
    EXPECT_EQ(route(rt, http::verb::get, "/a"), "get route=/a");
    EXPECT_EQ(route(rt, http::verb::head, "/a"), "get route=/a");
    EXPECT_EQ(route(rt, http::verb::put, "/a"), "put route=/a");
    // An all-literal path with no route for the method still finds a
    // parameter route that has one.
    EXPECT_EQ(route(rt, http::verb::post, "/a"), "post id=a route=/{id}");
    EXPECT_EQ(route(rt, http::verb::delete_, "/a"), "405 GET, HEAD, POST, PUT");
    EXPECT_EQ(route(rt, http::verb::get, "/nope/x"), "404");
    EXPECT_EQ(route(rt, http::verb::get, "a"), "400");
}

TEST(Router, HeadPrefersTheRouteAddedFirst) {
    http::router rt;
    rt.add(http::verb::head, "/h", says("head"));
    rt.get("/h", says("get"));
    EXPECT_EQ(route(rt, http::verb::head, "/h"), "head route=/h");
    EXPECT_EQ(route(rt, http::verb::get, "/h"), "get route=/h");
}

TEST(Router, EscapesDecodeWithinTheirSegment) {
    http::router rt;
    rt.get("/a b", says("space"));
    rt.get("/x%2Fy", says("slash"));  // one segment "x/y"
    rt.get("/x/y", says("two"));
    EXPECT_EQ(route(rt, http::verb::get, "/a%20b"), "space route=/a b");
    EXPECT_EQ(route(rt, http::verb::get, "/x%2Fy"), "slash route=/x%2Fy");
    EXPECT_EQ(route(rt, http::verb::get, "/x/y?q=1"), "two route=/x/y");
    EXPECT_EQ(route(rt, http::verb::get, "/x/%79"), "two route=/x/y");
    EXPECT_EQ(route(rt, http::verb::get, "/a%2"), "400");
}

TEST(Router, BadPatternsAreNamed) {
    http::router rt;
    rt.get("/d", says("d"));
    auto message = [&](const char* pattern) -> std::string {
        try {
            rt.get(pattern, says("x"));
        } catch (const std::invalid_argument& e) {
            return e.what();
        }
        return "accepted";
    };
    EXPECT_NE(message("nope").find("\"nope\""), std::string::npos);
    EXPECT_NE(message("/a/*/b").find("'*' may only be the last"), std::string::npos);
    EXPECT_NE(message("/{x}/{x}").find("twice"), std::string::npos);
    EXPECT_NE(message("/d").find("duplicates"), std::string::npos);
}
