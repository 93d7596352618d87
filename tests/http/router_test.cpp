// The router alone: specificity, 404/405, HEAD, decoding, and that the
// all-literal fast path agrees with the full scan.
#include <smarm/http/router.hpp>

#include "request_access.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
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

// Each case: method, target, what route() reports.
struct expect_case {
    http::verb method;
    const char* target;
    const char* routed;
};

void check(const http::router& rt, std::initializer_list<expect_case> cases) {
    for (const auto& k : cases) {
        SCOPED_TRACE(k.target);
        EXPECT_EQ(route(rt, k.method, k.target), k.routed);
    }
}

constexpr auto get = http::verb::get;

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
        check(rt, {{get, "/u/me", "literal route=/u/me"},
                   {get, "/u/7", "param id=7 route=/u/{id}"},
                   {get, "/u/7/x", "wild rest=7/x route=/u/*"},
                   // "/u/*" also matches "/u" with an empty rest; the exact
                   // route wins.
                   {get, "/u", "bare route=/u"},
                   // The same through the full scan (an escaped path skips
                   // the all-literal lookup).
                   {get, "/%75", "bare route=/u"},
                   {get, "/u/%6De", "literal route=/u/me"}});
    }
}

TEST(Router, MethodsHeadAnd405) {
    http::router rt;
    rt.get("/a", says("get"));
    rt.put("/a", says("put"));
    rt.post("/{id}", says("post"));
    check(rt, {{get, "/a", "get route=/a"},
               {http::verb::head, "/a", "get route=/a"},
               {http::verb::put, "/a", "put route=/a"},
               // An all-literal path with no route for the method still
               // finds a parameter route that has one.
               {http::verb::post, "/a", "post id=a route=/{id}"},
               {http::verb::delete_, "/a", "405 GET, HEAD, POST, PUT"},
               {get, "/nope/x", "404"},
               {get, "a", "400"}});
}

TEST(Router, HeadPrefersTheRouteAddedFirst) {
    http::router rt;
    rt.add(http::verb::head, "/h", says("head"));
    rt.get("/h", says("get"));
    check(rt, {{http::verb::head, "/h", "head route=/h"}, {get, "/h", "get route=/h"}});
}

TEST(Router, EscapesDecodeWithinTheirSegment) {
    http::router rt;
    rt.get("/a b", says("space"));
    rt.get("/x%2Fy", says("slash"));  // one segment "x/y"
    rt.get("/x/y", says("two"));
    check(rt, {{get, "/a%20b", "space route=/a b"},
               {get, "/x%2Fy", "slash route=/x%2Fy"},
               {get, "/x/y?q=1", "two route=/x/y"},
               {get, "/x/%79", "two route=/x/y"},
               {get, "/a%2", "400"}});
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

TEST(Request, QueryAndFormParametersDecodeAndTheBodyWins) {
    auto q = make(http::verb::post, "/x?a=1&sites=GET%20/k,b&plus=a+b&bad=%zz&bare");
    EXPECT_EQ(q.query_param("a"), "1");
    EXPECT_EQ(q.query_param("sites"), "GET /k,b");
    EXPECT_EQ(q.query_param("plus"), "a+b");  // '+' is literal in a query
    EXPECT_EQ(q.query_param("bad"), std::nullopt);
    EXPECT_EQ(q.query_param("bare"), "");
    EXPECT_EQ(q.query_param("none"), std::nullopt);
    // Without a form Content-Type the body is not read.
    q.body() = "a=2";
    EXPECT_EQ(q.form_param("a"), "1");
    request_access::headers(q).push_back(
        {"content-type", "application/x-www-form-urlencoded; charset=utf-8"});
    q.body() = "a=2&sites=GET+/items/{id},x%2Cy";
    EXPECT_EQ(q.form_param("a"), "2");  // the body wins
    EXPECT_EQ(q.form_param("sites"), "GET /items/{id},x,y");
    EXPECT_EQ(q.form_param("plus"), "a+b");  // not in the body: the query's
}

TEST(Router, RoutesListTheirNamesAndServicesInMatchOrder) {
    http::router r;
    r.get("/a", says("a"));
    r.put("/kv/{key}", says("kv"));
    const auto info = r.routes();
    ASSERT_EQ(info.size(), 2u);
    EXPECT_EQ(info[0].name(), "GET /a");
    EXPECT_EQ(info[1].name(), "PUT /kv/{key}");
    EXPECT_EQ(info[1].service, "");
    auto req = make(http::verb::put, "/kv/z");
    EXPECT_EQ(r.match(req).index, 1u);
    auto req2 = make(http::verb::get, "/a");
    EXPECT_EQ(r.match(req2).index, 0u);
}
