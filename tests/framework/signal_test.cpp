// smarm::signal_set: deliveries reach every live set, in order, only after
// the set exists; the handler stays while any set holds the signal and the
// previous disposition comes back after the last.

#include <smarm/runtime.hpp>
#include <smarm/signal.hpp>

#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;

namespace {

std::atomic<int> g_previous_handler_calls{0};
extern "C" void previous_handler(int) {
    g_previous_handler_calls.fetch_add(1, std::memory_order_relaxed);
}

/// The current handler for `sig`.
void (*handler_of(int sig))(int) {
    struct sigaction sa {};
    ::sigaction(sig, nullptr, &sa);
    return sa.sa_handler;
}

}  // namespace

SMARM_TEST(SignalSet, DeliversARaisedSignal) {
    smarm::signal_set s{SIGUSR1};
    ASSERT_EQ(::raise(SIGUSR1), 0);
    EXPECT_EQ(s.wait(5s), SIGUSR1);
}

SMARM_TEST(SignalSet, QueuesDeliveriesInOrderOnePerWait) {
    smarm::signal_set s{SIGUSR1, SIGUSR2};
    ::raise(SIGUSR2);
    ::raise(SIGUSR1);
    ::raise(SIGUSR2);
    EXPECT_EQ(s.wait(5s), SIGUSR2);
    EXPECT_EQ(s.wait(5s), SIGUSR1);
    EXPECT_EQ(s.wait(5s), SIGUSR2);
    EXPECT_EQ(s.wait(20ms), 0);  // nothing more
}

SMARM_TEST(SignalSet, TimesOutWithZero) {
    smarm::signal_set s{SIGUSR1};
    const auto t0 = smarm_test::steady::now();
    EXPECT_EQ(s.wait(30ms), 0);
    EXPECT_GE(smarm_test::since(t0), 30ms);
}

SMARM_TEST(SignalSet, EverySetGetsItsOwnCopy) {
    smarm::signal_set a{SIGUSR1};
    smarm::signal_set b{SIGUSR1, SIGUSR2};
    ::raise(SIGUSR1);
    EXPECT_EQ(a.wait(5s), SIGUSR1);
    EXPECT_EQ(b.wait(5s), SIGUSR1);
    ::raise(SIGUSR2);  // only b holds it
    EXPECT_EQ(b.wait(5s), SIGUSR2);
    EXPECT_EQ(a.wait(20ms), 0);
}

SMARM_TEST(SignalSet, SignalsBeforeTheSetAreNotItsOwn) {
    std::optional<smarm::signal_set> first(std::in_place, std::initializer_list<int>{SIGUSR1});
    ::raise(SIGUSR1);  // to `first` only
    smarm::signal_set second{SIGUSR1};
    EXPECT_EQ(second.wait(20ms), 0);
    EXPECT_EQ(first->wait(5s), SIGUSR1);
    // A slot given back and leased again starts empty.
    ::raise(SIGUSR1);
    first.reset();
    smarm::signal_set third{SIGUSR1};
    EXPECT_EQ(second.wait(5s), SIGUSR1);
    EXPECT_EQ(third.wait(20ms), 0);
}

SMARM_TEST(SignalSet, OneSetEndingKeepsTheHandlerForAnother) {
    auto* outer = new smarm::signal_set{SIGUSR1};
    {
        smarm::signal_set inner{SIGUSR1};
        delete outer;      // the older set goes first (a restarted server's predecessor)
        ::raise(SIGUSR1);  // would end the process were the default back
        EXPECT_EQ(inner.wait(5s), SIGUSR1);
    }
}

SMARM_TEST(SignalSet, ThePreviousDispositionComesBackAfterTheLastSet) {
    struct sigaction sa {};
    sa.sa_handler = previous_handler;
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(::sigaction(SIGUSR2, &sa, nullptr), 0);
    {
        smarm::signal_set a{SIGUSR2};
        {
            smarm::signal_set b{SIGUSR2};
            EXPECT_NE(handler_of(SIGUSR2), previous_handler);
        }
        EXPECT_NE(handler_of(SIGUSR2), previous_handler);
        ::raise(SIGUSR2);
        EXPECT_EQ(a.wait(5s), SIGUSR2);
        EXPECT_EQ(g_previous_handler_calls.load(), 0);
    }
    EXPECT_EQ(handler_of(SIGUSR2), previous_handler);
    ::raise(SIGUSR2);
    EXPECT_EQ(g_previous_handler_calls.load(), 1);
    sa.sa_handler = SIG_DFL;
    ::sigaction(SIGUSR2, &sa, nullptr);
}

SMARM_TEST(SignalSet, WaitParksOnlyItsActor) {
    smarm::signal_set s{SIGUSR1};
    std::atomic<bool> ran{false};
    auto h = smarm::spawn([&] {
        ran = true;
        ::raise(SIGUSR1);
    });
    EXPECT_EQ(s.wait(5s), SIGUSR1);
    h.join();
    EXPECT_TRUE(ran.load());
}

TEST(SignalSet, RejectsSignalsThatCannotBeCaught) {
    EXPECT_THROW(smarm::signal_set({SIGKILL}), std::invalid_argument);
    EXPECT_THROW(smarm::signal_set({SIGSTOP}), std::invalid_argument);
    EXPECT_THROW(smarm::signal_set({0}), std::invalid_argument);
    EXPECT_THROW(smarm::signal_set({65}), std::invalid_argument);
    EXPECT_THROW(smarm::signal_set({}), std::invalid_argument);
    try {
        smarm::signal_set({SIGUSR1, SIGKILL});
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("signal 9"), std::string::npos) << e.what();
    }
    // Nothing was held by the failed construction.
    EXPECT_EQ(handler_of(SIGUSR1), SIG_DFL);
}

SMARM_TEST(SignalSet, WaitSignalTakesOneDelivery) {
    // `keep` holds the handler so a raise before wait_signal's own set
    // exists is caught (by `keep`) rather than fatal; the raiser repeats
    // until wait_signal has returned.
    smarm::signal_set keep{SIGUSR1};
    std::atomic<bool> done{false};
    auto h = smarm::spawn([&] {
        while (!done.load()) {
            ::raise(SIGUSR1);
            smarm::sleep(5ms);
        }
    });
    EXPECT_EQ(smarm::wait_signal({SIGUSR1}), SIGUSR1);
    done = true;
    h.join();
}
