// Randomized stress of the wait protocol: many actors on several schedulers
// sending, receiving with timeouts, selecting, sleeping, yielding and being
// stopped. Invariants: every message sent to a live consumer is received
// exactly once or handed back; every actor ends; the run terminates. Built
// and run under TSan by `make test-tsan`.

#include <smarm/channel.hpp>
#include <smarm/mutex.hpp>
#include <smarm/runtime.hpp>
#include <smarm/select.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <utility>
#include <vector>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;

namespace {

// A message that counts itself as dropped when destroyed unconsumed (e.g.
// still queued when its receiver went away).
struct tracked {
    std::atomic<long>* dropped = nullptr;
    explicit tracked(std::atomic<long>* d) : dropped(d) {}
    tracked(tracked&& o) noexcept : dropped(std::exchange(o.dropped, nullptr)) {}
    tracked& operator=(tracked&&) = delete;
    void consume() { dropped = nullptr; }
    ~tracked() {
        if (dropped) dropped->fetch_add(1);
    }
};

TEST(Stress, RandomSendsSleepsStopsAccountForEveryMessage) {
    constexpr int consumers = 32;
    constexpr int producers = 64;
    constexpr int per_producer = 300;
    std::atomic<long> sent{0}, received{0}, returned{0}, dropped{0};
    smarm_test::run(
        [&] {
            std::vector<smarm::sender<tracked>> inboxes;
            std::vector<smarm::join_handle> cons;
            for (int c = 0; c < consumers; ++c) {
                auto [tx, rx] = smarm::channel<tracked>();
                inboxes.push_back(tx);
                cons.push_back(smarm::spawn([&, rx = std::move(rx), c] {
                    std::mt19937 rng(static_cast<unsigned>(c));
                    for (;;) {
                        auto r = rx.recv_timeout(std::chrono::microseconds(rng() % 2000));
                        if (r.status == smarm::recv_status::closed) break;
                        if (r) {
                            r.value->consume();
                            received.fetch_add(1);
                        }
                        if (rng() % 16 == 0) smarm::yield_now();
                    }
                }));
            }
            std::vector<smarm::join_handle> prods;
            for (int p = 0; p < producers; ++p)
                prods.push_back(smarm::spawn([&, p, inboxes] {
                    std::mt19937 rng(static_cast<unsigned>(1000 + p));
                    for (int i = 0; i < per_producer; ++i) {
                        auto& to = inboxes[rng() % inboxes.size()];
                        sent.fetch_add(1);
                        auto res = to.send(tracked(&dropped));
                        if (!res.ok()) {
                            res.returned->consume();
                            returned.fetch_add(1);
                        }
                        switch (rng() % 8) {
                            case 0:
                                smarm::sleep(std::chrono::microseconds(rng() % 300));
                                break;
                            case 1:
                                smarm::yield_now();
                                break;
                            default:
                                break;
                        }
                    }
                }));
            // Stop a few consumers mid-stream: what they had queued is
            // dropped with their receiver, later sends are handed back.
            smarm::sleep(2ms);
            for (int c = 0; c < consumers; c += 8)
                smarm::request_stop(cons[c].id());
            for (auto& p : prods)
                p.join();
            inboxes.clear();  // close every inbox: consumers drain and exit
            for (auto& c : cons)
                c.join();
        },
        4);
    EXPECT_EQ(sent.load(), producers * per_producer);
    EXPECT_EQ(received.load() + returned.load() + dropped.load(), sent.load());
    EXPECT_GT(received.load(), 0);
}

SMARM_TEST_N(Stress, SelectAndMutexUnderContention, 4) {
    smarm::mutex<long> total(0);
    auto [atx, arx] = smarm::channel<int>();
    auto [btx, brx] = smarm::channel<int>();
    auto sink = smarm::spawn([&, arx = std::move(arx), brx = std::move(brx)] {
        int open = 2;
        bool a_open = true, b_open = true;
        while (open > 0) {
            std::size_t i = a_open && b_open ? smarm::select({arx, brx}) : a_open ? 0 : 1;
            auto& rx = i == 0 ? arx : brx;
            auto r = rx.try_recv();
            if (r.status == smarm::recv_status::closed) {
                (i == 0 ? a_open : b_open) = false;
                --open;
            } else if (r) {
                *total.lock() += *r.value;
            }
            if (open == 1) {
                auto& last = a_open ? arx : brx;
                while (auto v = last.recv())
                    *total.lock() += *v;
                open = 0;
            }
        }
    });
    std::vector<smarm::join_handle> hs;
    for (int k = 0; k < 16; ++k)
        hs.push_back(smarm::spawn([&, k, atx = atx, btx = btx] {
            for (int i = 0; i < 500; ++i) {
                (void)(k % 2 ? atx : btx).send(1);
                if (i % 50 == 0) *total.lock() += 0;
            }
        }));
    for (auto& h : hs)
        h.join();
    {
        auto a = std::move(atx);
        auto b = std::move(btx);
    }
    sink.join();
    EXPECT_EQ(*total.lock(), 16 * 500);
}

SMARM_TEST_N(Stress, SpawnJoinChurnAcrossSchedulers, 4) {
    std::atomic<long> n{0};
    std::vector<smarm::join_handle> waves;
    for (int w = 0; w < 8; ++w)
        waves.push_back(smarm::spawn([&] {
            for (int i = 0; i < 2000; ++i)
                smarm::spawn([&] { n.fetch_add(1); }).join();
        }));
    for (auto& w : waves)
        w.join();
    EXPECT_EQ(n.load(), 8 * 2000);
}

}  // namespace
