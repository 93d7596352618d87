#include <smarm/channel.hpp>
#include <smarm/introspect.hpp>
#include <smarm/registry.hpp>
#include <smarm/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <smarm_test/run.hpp>

using namespace std::chrono_literals;

namespace {

constexpr smarm::name<int> counter{"counter"};
constexpr smarm::name<std::string> echo{"echo"};

SMARM_TEST(Registry, RegisterWhereisSend) {
    auto [tx, rx] = smarm::channel<int>();
    EXPECT_TRUE(smarm::register_name(counter, tx));
    EXPECT_EQ(smarm::whereis(counter), smarm::self_pid());
    EXPECT_FALSE(smarm::register_name(counter, tx)) << "held by a live actor";
    auto r = smarm::spawn([] { EXPECT_TRUE(smarm::send(counter, 5).ok()); });
    r.join();
    EXPECT_EQ(*rx.recv(), 5);
    EXPECT_TRUE(smarm::unregister(counter));
    EXPECT_FALSE(smarm::whereis(counter).has_value());
    auto back = smarm::send(counter, 6);
    EXPECT_EQ(back.error, smarm::name_error::unresolved);
    EXPECT_EQ(back.returned, 6) << "the message is handed back";
}

SMARM_TEST(Registry, DeadHolderIsPrunedOnContactAndNameIsReusable) {
    auto [done_tx, done_rx] = smarm::channel<int>();
    auto h = smarm::spawn([done_tx] {
        auto [tx, rx] = smarm::channel<int>();
        EXPECT_TRUE(smarm::register_name(counter, tx));
        (void)done_tx.send(1);
    });
    (void)done_rx.recv();
    h.join();  // the holder is gone; its binding is still there
    auto r = smarm::send(counter, 1);
    EXPECT_EQ(r.error, smarm::name_error::dead);
    EXPECT_EQ(smarm::send(counter, 2).error, smarm::name_error::unresolved) << "pruned";
    auto [tx, rx] = smarm::channel<int>();
    EXPECT_TRUE(smarm::register_name(counter, tx));
}

// Seed test stale_name_slot_reuse: the dead holder's slot now hosts another
// actor (same index, new generation). The name must read as dead, not as
// held by the new tenant.
SMARM_TEST_N(Registry, StaleNameSlotReuse, 1) {
    smarm::pid first;
    {
        auto h = smarm::spawn([] {
            auto [tx, rx] = smarm::channel<int>();
            smarm::register_name(counter, tx);
        });
        first = h.id();
        h.join();
    }
    // Re-tenant the slot: a spawn after the reclaim reuses it (LIFO).
    auto [stop_tx, stop_rx] = smarm::channel<int>();
    auto tenant = smarm::spawn([rx = std::move(stop_rx)] { (void)rx.recv(); });
    EXPECT_EQ(tenant.id().index, first.index);
    EXPECT_NE(tenant.id().generation, first.generation);
    EXPECT_FALSE(smarm::whereis(counter).has_value()) << "a re-tenanted slot is not the holder";
    auto [tx, rx] = smarm::channel<int>();
    EXPECT_TRUE(smarm::register_name(counter, tx)) << "a dead name is re-registrable";
    (void)stop_tx.send(1);
    tenant.join();
}

SMARM_TEST(Registry, TypeMismatchAndClosedInbox) {
    constexpr smarm::name<std::string> wrong{"counter"};
    auto [tx, rx] = smarm::channel<int>();
    smarm::register_name(counter, tx);
    auto r = smarm::send(wrong, std::string("x"));
    EXPECT_EQ(r.error, smarm::name_error::no_channel);
    EXPECT_EQ(*r.returned, "x");
    { auto gone = std::move(rx); }
    auto c = smarm::send(counter, 3);
    EXPECT_EQ(c.error, smarm::name_error::closed);
    EXPECT_EQ(c.returned, 3);
    EXPECT_STREQ(smarm::to_string(*c.error), "closed");
}

SMARM_TEST(Registry, SeveralTypedNamesAndIntrospection) {
    auto [itx, irx] = smarm::channel<int>();
    auto [stx, srx] = smarm::channel<std::string>();
    EXPECT_TRUE(smarm::register_name(counter, itx));
    EXPECT_TRUE(smarm::register_name(echo, stx));
    (void)smarm::send(counter, 1);
    (void)smarm::send(counter, 2);
    (void)smarm::send(echo, std::string("hi"));
    auto me = smarm::introspect::info(smarm::self_pid());
    ASSERT_TRUE(me);
    EXPECT_EQ(me->names.size(), 2u);
    EXPECT_NE(std::find(me->names.begin(), me->names.end(), "echo"), me->names.end());
    ASSERT_TRUE(me->mailbox_depth.has_value());
    EXPECT_EQ(*me->mailbox_depth, 3u);
    auto snap = smarm::introspect::take_snapshot();
    auto it = std::find_if(snap.actors.begin(), snap.actors.end(),
                           [](auto& a) { return a.id == smarm::self_pid(); });
    ASSERT_NE(it, snap.actors.end());
    EXPECT_EQ(it->names.size(), 2u);
    (void)irx;
    (void)srx;
}

SMARM_TEST(Registry, SpawnAddrPublishesATypedInbox) {
    auto [reply_tx, reply_rx] = smarm::channel<int>();
    auto [h, addr] = smarm::spawn_addr<int>([reply_tx](smarm::receiver<int> inbox) {
        while (auto v = inbox.recv())
            (void)reply_tx.send(*v * 2);
    });
    (void)addr.send(21);
    EXPECT_EQ(*reply_rx.recv(), 42);
    EXPECT_TRUE(smarm::register_name(counter, addr)) << "an address can be published";
    EXPECT_TRUE(smarm::send(counter, 1).ok());
    EXPECT_EQ(*reply_rx.recv(), 2);
    smarm::unregister(counter);
    { auto close = std::move(addr); }
    h.join();
}

}  // namespace
