// smarm-pg-pipeline DSN [ROUNDS]: where a pipeline helps. Inserts 1,000
// rows one statement per round trip and then in pipelines of 100, in
// interleaved rounds, and prints each round's time and the ratio
// (sequential / pipelined), median (min..max). Run it against a server of
// its own: scripts/pgtest.sh init /tmp/pgb, then
//   smarm-pg-pipeline "host=/tmp/pgb port=5432 user=smarm dbname=postgres"

#include <smarm/postgres/postgres.hpp>
#include <smarm/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace pq = smarm::postgres;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s DSN [ROUNDS]\n", argv[0]);
        return 2;
    }
    const std::string dsn = argv[1];
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    int status = 0;
    smarm::runtime_config rc;
    rc.schedulers = 1;
    smarm::runtime rt(rc);
    rt.run([&] {
        try {
            auto c = pq::connection::connect({.conninfo = dsn});
            c.execute("drop table if exists pipeline_bench");
            c.execute("create table pipeline_bench (id int, body text)");
            constexpr int rows = 1000, batch = 100;
            auto sequential = [&] {
                for (int i = 0; i < rows; ++i)
                    c.execute("insert into pipeline_bench values ($1, $2)", i, "row");
            };
            auto pipelined = [&] {
                for (int i = 0; i < rows; i += batch) {
                    std::vector<pq::statement> sts;
                    for (int j = i; j < i + batch; ++j)
                        sts.emplace_back("insert into pipeline_bench values ($1, $2)", j, "row");
                    (void)c.pipeline(sts);
                }
            };
            auto timed = [](auto&& f) {
                const auto t0 = clock_type::now();
                f();
                return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
            };
            timed(sequential);  // warm: the statement prepared, caches hot
            timed(pipelined);
            std::vector<double> ratios;
            for (int r = 0; r < rounds; ++r) {
                double s, p;
                if (r % 2 == 0) {
                    s = timed(sequential);
                    p = timed(pipelined);
                } else {
                    p = timed(pipelined);
                    s = timed(sequential);
                }
                ratios.push_back(s / p);
                std::printf("round %d: %d inserts sequential %.1f ms, pipelined by %d %.1f ms\n",
                            r + 1, rows, s, batch, p);
            }
            std::sort(ratios.begin(), ratios.end());
            std::printf("sequential / pipelined: %.2f (%.2f..%.2f)\n", ratios[ratios.size() / 2],
                        ratios.front(), ratios.back());
            c.execute("drop table pipeline_bench");
        } catch (const std::exception& e) {
            std::fprintf(stderr, "smarm-pg-pipeline: %s\n", e.what());
            status = 1;
        }
    });
    return status;
}
