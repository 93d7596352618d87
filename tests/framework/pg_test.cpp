#include <smarm/channel.hpp>
#include <smarm/pg.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <smarm_test/run.hpp>

namespace {

constexpr smarm::group<int> workers{"workers"};
constexpr smarm::group<int> other{"other"};

// A member that joins `workers` (and `other`) and forwards what it gets.
smarm::join_handle member(smarm::sender<std::pair<smarm::pid, int>> report,
                          smarm::sender<int> joined) {
    return smarm::spawn([report = std::move(report), joined = std::move(joined)] {
        auto [tx, rx] = smarm::channel<int>();
        smarm::join(workers, tx);
        smarm::join(workers, tx);  // idempotent
        smarm::join(other, tx);
        (void)joined.send(1);
        while (auto v = rx.recv()) {
            if (*v < 0) return;
            (void)report.send({smarm::self_pid(), *v});
        }
    });
}

SMARM_TEST(Pg, JoinMembersDispatchRoundRobin) {
    auto [rtx, rrx] = smarm::channel<std::pair<smarm::pid, int>>();
    auto [jtx, jrx] = smarm::channel<int>();
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 3; ++i)
        hs.push_back(member(rtx, jtx));
    for (int i = 0; i < 3; ++i)
        (void)jrx.recv();
    EXPECT_EQ(smarm::members(workers).size(), 3u) << "join is idempotent";
    std::set<smarm::pid> got;
    for (int i = 0; i < 3; ++i)
        EXPECT_TRUE(smarm::dispatch(workers, i).ok());
    for (int i = 0; i < 3; ++i)
        got.insert(rrx.recv()->first);
    EXPECT_EQ(got.size(), 3u) << "round robin reaches every member";
    for (int i = 0; i < 3; ++i)
        (void)smarm::dispatch(workers, -1);
    for (auto& h : hs)
        h.join();
}

SMARM_TEST(Pg, BroadcastReachesEveryMemberInOrder) {
    auto [rtx, rrx] = smarm::channel<std::pair<smarm::pid, int>>();
    auto [jtx, jrx] = smarm::channel<int>();
    std::vector<smarm::join_handle> hs;
    for (int i = 0; i < 3; ++i)
        hs.push_back(member(rtx, jtx));
    for (int i = 0; i < 3; ++i)
        (void)jrx.recv();
    for (int v = 0; v < 5; ++v)
        EXPECT_EQ(smarm::broadcast(workers, v), 3u);
    std::map<smarm::pid, std::vector<int>> got;
    for (int i = 0; i < 15; ++i) {
        auto r = rrx.recv();
        got[r->first].push_back(r->second);
    }
    ASSERT_EQ(got.size(), 3u);
    for (auto& [p, vs] : got)
        EXPECT_EQ(vs, (std::vector<int>{0, 1, 2, 3, 4})) << "every message once, in order";
    EXPECT_EQ(smarm::broadcast(workers, -1), 3u);
    for (auto& h : hs)
        h.join();
    EXPECT_EQ(smarm::broadcast(workers, 1), 0u) << "no member left";
}

SMARM_TEST(Pg, BroadcastSkipsAMemberAtItsQueueBound) {
    constexpr smarm::group<int> slow{"slow"};
    auto [tx, rx] = smarm::channel<int>();  // the root is the member; it does not read yet
    smarm::join(slow, tx);
    EXPECT_EQ(smarm::broadcast(slow, 1, 2), 1u);
    EXPECT_EQ(smarm::broadcast(slow, 2, 2), 1u);
    EXPECT_EQ(smarm::broadcast(slow, 3, 2), 0u) << "two queued: skipped";
    EXPECT_EQ(rx.queued(), 2u);
    EXPECT_EQ(*rx.try_recv().value, 1);
    EXPECT_EQ(smarm::broadcast(slow, 4, 2), 1u) << "room again";
    EXPECT_EQ(*rx.try_recv().value, 2);
    EXPECT_EQ(*rx.try_recv().value, 4);
    EXPECT_TRUE(smarm::leave(slow));
}

SMARM_TEST(Pg, DeadMemberIsNeverReturnedAndEvictedFromEveryGroup) {
    auto [rtx, rrx] = smarm::channel<std::pair<smarm::pid, int>>();
    auto [jtx, jrx] = smarm::channel<int>();
    auto a = member(rtx, jtx);
    auto b = member(rtx, jtx);
    (void)jrx.recv();
    (void)jrx.recv();
    smarm::pid dead = a.id();
    smarm::request_stop(dead);
    a.join();
    auto ms = smarm::members(workers);
    EXPECT_EQ(ms.size(), 1u);
    EXPECT_EQ(std::count(ms.begin(), ms.end(), dead), 0);
    EXPECT_EQ(smarm::members(other).size(), 1u) << "evicted from every group";
    for (int i = 0; i < 10; ++i)
        EXPECT_NE(smarm::pick(workers), dead);
    (void)smarm::dispatch(workers, -1);
    b.join();
    auto r = smarm::dispatch(workers, 7);
    EXPECT_EQ(r.error, smarm::name_error::no_member);
    EXPECT_EQ(r.returned, 7);
}

SMARM_TEST(Pg, LeaveRemovesOnlyTheCaller) {
    auto [tx, rx] = smarm::channel<int>();
    smarm::join(workers, tx);
    EXPECT_EQ(smarm::members(workers).size(), 1u);
    EXPECT_TRUE(smarm::leave(workers));
    EXPECT_FALSE(smarm::leave(workers));
    EXPECT_TRUE(smarm::members(workers).empty());
    EXPECT_FALSE(smarm::pick(workers).has_value());
}

}  // namespace
