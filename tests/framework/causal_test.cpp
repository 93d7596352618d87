// The causal profiler's rules (smarm/causal.hpp), each on its own: site
// nesting, born current, forgiveness only after a real park, debt kept over
// a yield and paid at observation points, the tail flushed at site exit,
// the sample clock re-armed at site entry.

#include <smarm/causal.hpp>
#include <smarm/channel.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;
namespace causal = smarm::causal;

namespace {

/// Compute with no observation point in it (the loop never yields).
void burn(std::chrono::nanoseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
}

double ms(std::uint64_t ticks) {
    return causal::ticks_to_ns(ticks) / 1e6;
}

/// A few milliseconds of debt, in ticks.
std::uint64_t debt_ticks(double ms_) {
    std::uint64_t t = 1;
    while (causal::ticks_to_ns(t) < ms_ * 1e6)
        t *= 2;
    return t;
}

}  // namespace

TEST(Causal, GuardsAreInertOutsideAnActorAndBadExperimentsAreRefused) {
    const auto s = causal::register_site("outside");
    {
        auto g = SMARM_CAUSAL_SITE("outside");
        EXPECT_EQ(causal::current_site(), 0u);
    }
    EXPECT_EQ(causal::register_site("outside"), s);
    EXPECT_EQ(causal::site_name(s), "outside");
    EXPECT_THROW(causal::begin(0, 10), std::invalid_argument);
    EXPECT_THROW(causal::begin(s, 101), std::invalid_argument);
    EXPECT_THROW(causal::begin(987654, 10), std::invalid_argument);
    EXPECT_FALSE(causal::running());
}

SMARM_TEST(Causal, SitesNestAndSurviveYields) {
    EXPECT_EQ(causal::current_site(), 0u);
    {
        auto outer = SMARM_CAUSAL_SITE("outer");
        const auto o = causal::current_site();
        EXPECT_EQ(causal::site_name(o), "outer");
        {
            auto inner = SMARM_CAUSAL_SITE("inner");
            EXPECT_EQ(causal::site_name(causal::current_site()), "inner");
            smarm::yield_now();  // may resume on the other scheduler
            EXPECT_EQ(causal::site_name(causal::current_site()), "inner");
        }
        EXPECT_EQ(causal::current_site(), o);
    }
    EXPECT_EQ(causal::current_site(), 0u);
}

SMARM_TEST(Causal, ANewActorIsBornCurrent) {
    causal::inject_for_test(debt_ticks(1));
    const std::uint64_t global = causal::global_delay();
    auto h = smarm::spawn([global] { EXPECT_GE(causal::my_delay(), global); });
    h.join();
}

SMARM_TEST(Causal, ARealParkIsForgivenAYieldIsNot) {
    auto [tx, rx] = smarm::channel<int>();
    auto h = smarm::spawn([rx = std::move(rx)]() mutable {
        const std::uint64_t before = causal::my_delay();
        causal::inject_for_test(debt_ticks(1));  // accrues while we run
        smarm::yield_now();                      // runnable all along: keeps the debt
        EXPECT_EQ(causal::my_delay(), before);
        EXPECT_LT(causal::my_delay(), causal::global_delay());
        (void)rx.recv();  // a real park: delay accrued meanwhile is forgiven
        EXPECT_EQ(causal::my_delay(), causal::global_delay());
    });
    smarm_test::await_parked(h.id());        // in recv
    causal::inject_for_test(debt_ticks(1));  // accrues while it waits
    (void)tx.send(1);
    h.join();
}

SMARM_TEST(Causal, DebtIsPaidAtObservationPointsOffTheSlice) {
    const auto site = causal::register_site("elsewhere");
    // Nobody is in the site: the window injects nothing, but debt owed
    // from before is paid by spinning at observation points.
    const auto before = causal::totals();
    causal::inject_for_test(debt_ticks(3));
    const std::uint64_t owed = causal::global_delay() - causal::my_delay();
    causal::begin(site, 0);
    const auto t0 = std::chrono::steady_clock::now();
    while (causal::my_delay() < causal::global_delay() &&
           std::chrono::steady_clock::now() - t0 < 10s)
        smarm::check();
    causal::end();
    const auto d = causal::totals() - before;
    EXPECT_EQ(causal::my_delay(), causal::global_delay());
    EXPECT_GE(d.absorbed, owed);
    EXPECT_EQ(d.injected, 0u);
}

SMARM_TEST(Causal, TheTailIsFlushedAtSiteExitAndEntryReArms) {
    const auto site = causal::register_site("hot");
    causal::begin(site, 50);
    // Entry re-arms: 60 ms of compute before the site is never its time
    // (without the re-arm it would inject >= 30 ms). An interval the OS
    // stretched past the sanity bound is discarded, not lost: both count.
    burn(60ms);
    auto before = causal::totals();
    { auto g = SMARM_CAUSAL_SITE("hot"); }
    auto d = causal::totals() - before;
    EXPECT_LT(ms(d.injected + d.discarded), 30.0);
    // Exit flushes: 4 ms in the site with no observation point inside is
    // at least 2 ms of injected delay at 50%, credited to this actor.
    before = causal::totals();
    const std::uint64_t mine = causal::my_delay();
    {
        auto g = SMARM_CAUSAL_SITE("hot");
        burn(4ms);
    }
    d = causal::totals() - before;
    causal::end();
    EXPECT_GE(ms(d.injected + d.discarded), 2.0 * 0.999);
    EXPECT_EQ(causal::my_delay() - mine, d.injected);
}

SMARM_TEST(Causal, AnInSiteSwitchOutFlushesItsTail) {
    const auto site = causal::register_site("parks");
    causal::begin(site, 100);
    auto [tx, rx] = smarm::channel<int>();
    auto h = smarm::spawn([tx = std::move(tx)]() mutable {
        smarm::sleep(50ms);  // long after the receiver parked
        (void)tx.send(1);
    });
    const auto before = causal::totals();
    {
        auto g = SMARM_CAUSAL_SITE("parks");
        burn(3ms);
        (void)rx.recv();  // parks inside the site
    }
    const auto d = causal::totals() - before;
    causal::end();
    h.join();
    EXPECT_EQ(d.tail_park_n + d.discarded_n, 1u);
    EXPECT_GE(ms(d.tail_park + d.discarded), 3.0 * 0.999);
}
