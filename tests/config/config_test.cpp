#include <smarm/config/config.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

using namespace std::chrono_literals;
namespace config = smarm::config;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::string error_of(const std::string& yaml,
                     const std::vector<std::pair<std::string, std::string>>& env = {}) {
    try {
        (void)config::load_from(yaml, env);
    } catch (const config::config_error& e) {
        return e.what();
    }
    return "";
}

TEST(Config, DefaultsMatchTheDocumentedFile) {
    auto d = config::load_from("");
    auto f = config::load_from(slurp(SMARM_SOURCE_DIR "/config/smarm.yaml"));
    EXPECT_EQ(config::to_yaml(d), config::to_yaml(f));
    // Every key is in the file with its doc comment.
    auto text = slurp(SMARM_SOURCE_DIR "/config/smarm.yaml");
    for (auto& k : config::keys()) {
        auto leaf = k.name.substr(k.name.find('.') + 1);
        EXPECT_NE(text.find("  " + leaf + ":"), std::string::npos) << k.name;
    }
}

TEST(Config, FileThenEnvironmentThenFlags) {
    auto s = config::load_from("http:\n  port: 9000\n  idle_timeout: 2m\n  body_limit: 4MiB\n",
                               {{"SMARM_HTTP_PORT", "9001"}, {"SMARM_LOG_LEVEL", "debug"}});
    EXPECT_EQ(s.http.port, 9001);
    EXPECT_EQ(s.http.idle_timeout, 120s);
    EXPECT_EQ(s.http.body_limit, 4u << 20);
    EXPECT_EQ(s.log.level, "debug");

    const std::string path = ::testing::TempDir() + "smarm_cfg.yaml";
    std::ofstream(path) << "http:\n  port: 9000\nruntime:\n  schedulers: 3\n";
    ::setenv("SMARM_HTTP_PORT", "9001", 1);
    const char* argv[] = {"smarm-server", "--config", path.c_str(), "--http.port=9002",
                          "--print-config"};
    auto c = config::load(5, argv);
    ::unsetenv("SMARM_HTTP_PORT");
    EXPECT_EQ(c.values.http.port, 9002);
    EXPECT_EQ(c.values.runtime.schedulers, 3u);
    EXPECT_TRUE(c.print_config);
    EXPECT_EQ(c.values.source, path);
}

TEST(Config, ErrorsNameTheKeyTheValueAndWhatIsAllowed) {
    auto e = error_of("http:\n  port: 70000\n");
    EXPECT_NE(e.find("http.port"), std::string::npos) << e;
    EXPECT_NE(e.find("70000"), std::string::npos) << e;
    EXPECT_NE(e.find("0..65535"), std::string::npos) << e;
    e = error_of("http:\n  prot: 80\n");
    EXPECT_NE(e.find("unknown key http.prot"), std::string::npos) << e;
    e = error_of("", {{"SMARM_HTTP_IDLE_TIMEOUT", "soon"}});
    EXPECT_NE(e.find("http.idle_timeout"), std::string::npos) << e;
    EXPECT_NE(e.find("SMARM_HTTP_IDLE_TIMEOUT"), std::string::npos) << e;
    e = error_of("log:\n  level: loud\n");
    EXPECT_NE(e.find("one of trace debug info warn error off"), std::string::npos) << e;
    e = error_of("http: [1, 2]\n");
    EXPECT_NE(e.find("section \"http\" must be a map"), std::string::npos) << e;
    e = error_of("http:\n  port: [1]\n");
    EXPECT_NE(e.find("single value"), std::string::npos) << e;
    e = error_of("http:\n  tls_certificate: a.pem\n");
    EXPECT_NE(e.find("set together"), std::string::npos) << e;
    e = error_of("causal:\n  http: sometimes\n");
    EXPECT_NE(e.find("causal.http"), std::string::npos) << e;
    EXPECT_FALSE(config::load_from("").causal.http);  // off by default
    EXPECT_TRUE(config::load_from("", {{"SMARM_CAUSAL_HTTP", "true"}}).causal.http);
    e = error_of("http:\n  port: 80\n bad indent: [\n");
    EXPECT_NE(e.find("not valid YAML"), std::string::npos) << e;
    const char* argv[] = {"smarm-server", "--no-such-flag"};
    EXPECT_THROW(config::load(2, argv), config::config_error);
}

TEST(Config, DurationsAndSizes) {
    EXPECT_EQ(config::parse_duration("250ms"), 250ms);
    EXPECT_EQ(config::parse_duration("3"), 3s);
    EXPECT_EQ(config::parse_duration(" 2m "), 120s);
    EXPECT_EQ(config::parse_duration("1h"), 3600s);
    EXPECT_THROW(config::parse_duration("1 fortnight"), std::invalid_argument);
    EXPECT_THROW(config::parse_duration("-5s"), std::invalid_argument);
    EXPECT_EQ(config::parse_size("8KiB"), 8192u);
    EXPECT_EQ(config::parse_size("1MB"), 1'000'000u);
    EXPECT_EQ(config::parse_size("17"), 17u);
    EXPECT_THROW(config::parse_size("1.5MiB"), std::invalid_argument);
    EXPECT_THROW(config::parse_size("99999999999999999999"), std::invalid_argument);
}

// Issue 27: the admin listener is the safe default, and its token never
// shows: not in --print-config, not in an error.
TEST(Config, AdminIsOnByDefaultAndItsTokenIsRedacted) {
    auto d = config::load_from("");
    EXPECT_TRUE(d.admin.enabled);
    EXPECT_EQ(d.admin.host, "127.0.0.1");
    EXPECT_TRUE(d.admin.token.empty());
    const std::string token = "a-token-of-twenty-six-char";
    auto s = config::load_from("", {{"SMARM_ADMIN_TOKEN", token}});
    EXPECT_EQ(s.admin.token, token);
    const std::string printed = config::to_yaml(s);
    EXPECT_NE(printed.find("token: \"<redacted>\""), std::string::npos) << printed;
    EXPECT_EQ(printed.find(token), std::string::npos) << printed;
    // The placeholder fed back in is refused, not taken as the token.
    EXPECT_NE(error_of(printed).find("admin.token"), std::string::npos);
    const auto short_one = error_of("admin:\n  token: tooshort\n");
    EXPECT_NE(short_one.find("admin.token"), std::string::npos) << short_one;
    EXPECT_NE(short_one.find("shorter than 16"), std::string::npos) << short_one;
    EXPECT_EQ(short_one.find("tooshort"), std::string::npos) << short_one;
    EXPECT_NE(error_of("admin:\n  token: \"has a space in it, long enough\"\n").find("visible ASCII"),
              std::string::npos);
}

// Issue 26: the database URL is printed with its password redacted, in
// either libpq form, and the placeholder fed back in is refused.
TEST(Config, PostgresUrlPrintsWithItsPasswordRedacted) {
    EXPECT_TRUE(config::load_from("").postgres.url.empty()) << "no database by default";
    for (auto [url, shown] : {
             std::pair{"postgresql://app:s3cret-pw@db:5432/app",
                       "postgresql://app:<redacted>@db:5432/app"},
             std::pair{"postgres://app@db/app?password=s3cret-pw&sslmode=require",
                       "postgres://app@db/app?password=<redacted>&sslmode=require"},
             std::pair{"host=db user=app password=s3cret-pw dbname=app",
                       "host=db user=app password=<redacted> dbname=app"},
             std::pair{"host=db password = 's3cret-pw with space' dbname=app",
                       "host=db password = <redacted> dbname=app"},
             std::pair{"postgresql:///app?host=/run/pg", "postgresql:///app?host=/run/pg"},
         }) {
        auto s = config::load_from("", {{"SMARM_POSTGRES_URL", url}});
        EXPECT_EQ(s.postgres.url, url);
        const std::string printed = config::to_yaml(s);
        EXPECT_NE(printed.find(std::string("url: \"") + shown + "\""), std::string::npos)
            << printed;
        EXPECT_EQ(printed.find("s3cret-pw"), std::string::npos) << printed;
        if (std::string(url) != shown) {
            EXPECT_NE(error_of(printed).find("postgres.url"), std::string::npos)
                << "the placeholder was taken as a password";
        }
    }
    EXPECT_NE(error_of("postgres:\n  pool_size: 0\n").find("postgres.pool_size"),
              std::string::npos);
}

TEST(Config, PrintedConfigLoadsBackTheSame) {
    auto s = config::load_from(
        "http:\n  port: 1234\n  access_log_file: \"/tmp/a \\\"b\\\".log\"\n  drain_timeout: "
        "1500ms\n");
    auto again = config::load_from(config::to_yaml(s));
    EXPECT_EQ(config::to_yaml(again), config::to_yaml(s));
    EXPECT_EQ(again.http.access_log_file, "/tmp/a \"b\".log");
    EXPECT_EQ(again.http.drain_timeout, 1500ms);
}

}  // namespace
