// The causal profiler's runtime half (include/smarm/causal.hpp): site
// registration, the experiment word, sampling, in-site waits outside,
// debt payment (per core, and an actor's own), forgiveness.
//
// Orderings: every atomic here is relaxed. The experiment word and the
// ledgers publish no other data; a scheduler that sees a window begin or
// end a little late samples or pays a little late, which the window's
// length absorbs (the controller reads totals after end()). The in-site
// waits' accrual (accrue) moves wait_mark forward by CAS, so each stretch
// of time is attributed once whichever scheduler gets there first; the
// waiter count read beside it may be a change behind, an error of one
// stretch between two samples.

#include "causal.hpp"

#include <algorithm>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include <immintrin.h>

#include "scheduler.hpp"
#include "slot_table.hpp"

namespace smarm::internal::causal_hooks {

std::atomic<std::uint64_t> experiment{0};
std::atomic<std::uint64_t> global_delay{0};

namespace {

std::atomic<std::uint64_t> window_start{0};  ///< ticks() at the last begin()
std::atomic<std::uint32_t> window_epoch{0};  ///< begin() calls so far
/// Actors waiting on the world outside from inside the selected site, and
/// the tick up to which their waits have been attributed: the global ledger
/// grows by pct% of the time they wait, as it passes (at every sample and
/// at each wait's start and end), so cores busy meanwhile pay as they run.
std::atomic<std::uint32_t> waiters{0};
std::atomic<std::uint64_t> wait_mark{0};
/// The global ledger at the last begin(): debt below it is a past
/// window's, forgiven at the next sample rather than paid inside this one
/// (where it would slow the window without being subtracted from it).
std::atomic<std::uint64_t> window_base{0};

struct counters {
    std::atomic<std::uint64_t> injected{0}, injected_n{0}, absorbed{0}, forgiven{0};
    std::atomic<std::uint64_t> tail_park{0}, tail_park_n{0}, tail_yield{0}, tail_yield_n{0};
    std::atomic<std::uint64_t> discarded{0}, discarded_n{0}, unarmed_n{0};
    std::atomic<std::uint64_t> offcpu{0}, offcpu_n{0};
    std::atomic<std::uint64_t> outside{0}, outside_n{0};
};
counters g;

void add(std::atomic<std::uint64_t>& c, std::uint64_t v) noexcept {
    c.fetch_add(v, std::memory_order_relaxed);
}

std::uint64_t ns_ticks(double ns) noexcept {
    return static_cast<std::uint64_t>(ns * ticks_per_ns());
}
/// A sample interval longer than this is a clock step, not a measurement.
std::uint64_t max_sample() noexcept {
    static const std::uint64_t v = ns_ticks(100e6);  // 100 ms
    return v;
}
/// The most debt one visit pays, so no single observation point stalls an
/// actor for long; the rest is paid at later visits.
std::uint64_t max_spin() noexcept {
    static const std::uint64_t v = ns_ticks(1e6);  // 1 ms
    return v;
}

struct selected {
    causal::site_id site;
    std::uint64_t pct;
};
selected decode(std::uint64_t word) noexcept {
    return {static_cast<causal::site_id>(word >> 32), word & 0xffffffffu};
}

/// The interval since the sample mark, or 0 when the mark predates the
/// window (then the mark is re-armed and the sample counted as unarmed).
std::uint64_t take_interval(scheduler& s, std::uint64_t now) noexcept {
    const std::uint64_t last = std::exchange(s.causal_mark, now);
    if (last == 0 || last < window_start.load(std::memory_order_relaxed)) {
        add(g.unarmed_n, 1);
        return 0;
    }
    return now - last;
}

/// One in-site interval at pct%: the global ledger grows, and the core
/// that ran it is credited the same (the credited gap is the virtual
/// speedup: what runs next on this core already starts that much later).
/// Returns the delay attributed (0 for a discarded interval).
std::uint64_t attribute(scheduler& s, std::uint64_t interval, std::uint64_t pct) noexcept {
    if (interval == 0 || pct == 0) return 0;
    const std::uint64_t delta = interval * pct / 100;
    if (interval > max_sample()) {
        add(g.discarded, delta);
        add(g.discarded_n, 1);
        return 0;
    }
    add(global_delay, delta);
    add(g.injected, delta);
    add(g.injected_n, 1);
    s.causal_delay += delta;
    return delta;
}

/// Attributes the in-site waits outside up to `now`.
void accrue(std::uint64_t now, std::uint64_t pct) noexcept {
    const std::uint32_t n = waiters.load(std::memory_order_relaxed);
    std::uint64_t last = wait_mark.load(std::memory_order_relaxed);
    while (now > last) {
        if (wait_mark.compare_exchange_weak(last, now, std::memory_order_relaxed)) {
            if (n == 0 || pct == 0) return;
            const std::uint64_t d = (now - last) * n * pct / 100;
            add(global_delay, d);
            add(g.injected, d);
            add(g.outside, d);
            return;
        }
    }
}

/// Delay owed from an earlier window is waived, not paid in this one
/// (where it would slow the window without being subtracted from it).
void forgive_old(scheduler& s, slot& sl) noexcept {
    if (const std::uint64_t base = window_base.load(std::memory_order_relaxed);
        s.causal_delay < base) {
        add(g.forgiven, base - s.causal_delay);
        s.causal_delay = base;
    }
    if (sl.causal_debt != 0 &&
        sl.causal_debt_window != window_epoch.load(std::memory_order_relaxed)) {
        add(g.forgiven, sl.causal_debt);
        sl.causal_debt = 0;
    }
}

/// Closes the in-site interval of the actor on `s` if it is in the target;
/// a switch-out also counts it in its tail bucket. Returns the delay
/// attributed.
std::uint64_t flush(scheduler& s, slot& sl, std::uint64_t word, std::atomic<std::uint64_t>* tail,
                    std::atomic<std::uint64_t>* tail_n) noexcept {
    const selected x = decode(word);
    if (sl.causal_site != x.site) return 0;
    const std::uint64_t delta = attribute(s, take_interval(s, ticks()), x.pct);
    if (tail != nullptr && delta != 0) {
        add(*tail, delta);
        add(*tail_n, 1);
    }
    return delta;
}

}  // namespace

void sample(scheduler& s, slot& sl) noexcept {
    const std::uint64_t word = experiment.load(std::memory_order_relaxed);
    if (word == 0) return;
    const selected x = decode(word);
    if (waiters.load(std::memory_order_relaxed) != 0) accrue(ticks(), x.pct);
    if (sl.causal_site == x.site) (void)attribute(s, take_interval(s, ticks()), x.pct);
    forgive_old(s, sl);
    // The core pays what the other cores' in-site samples added (in-site
    // actors too: Coz's threads in the selected line pay the others'
    // delays); the actor pays its own debt from the world outside. One spin
    // covers both: it delays the core's timeline as much as the actor's, so
    // the core may end up ahead of the global ledger and then skips that
    // much of what comes next. Per actor instead, in-site actors paid
    // nothing (a crowded site read +264% for a 50% speedup whose ceiling
    // was +100%) or paid for samples their own core had already run
    // (-28%).
    const std::uint64_t owed_global = global_delay.load(std::memory_order_relaxed);
    const std::uint64_t core_owes = owed_global > s.causal_delay ? owed_global - s.causal_delay : 0;
    const std::uint64_t owed = std::max(core_owes, sl.causal_debt);
    if (owed == 0) return;
    const std::uint64_t spin = std::min(owed, max_spin());
    const std::uint64_t start = ticks();
    std::uint64_t now = start;
    while (now - start < spin) {
        _mm_pause();
        now = ticks();
    }
    add(g.absorbed, spin);
    s.causal_delay += spin;
    sl.causal_debt -= std::min(spin, sl.causal_debt);
    // The paid delay is not compute: not charged to the slice, not seen by
    // the observation period's pacing, not in-site time.
    s.slice_end += spin;
    s.obs_mark += spin;
    if (s.causal_mark != 0) s.causal_mark = now;
}

void site_exit(scheduler& s, slot& sl) noexcept {
    const std::uint64_t word = experiment.load(std::memory_order_relaxed);
    if (word != 0) (void)flush(s, sl, word, nullptr, nullptr);
}

void leaving(scheduler& s, slot& sl, bool park) noexcept {
    const std::uint64_t word = experiment.load(std::memory_order_relaxed);
    if (word == 0) return;
    const std::uint64_t own = flush(s, sl, word, park ? &g.tail_park : &g.tail_yield,
                                    park ? &g.tail_park_n : &g.tail_yield_n);
    // Parking on the world outside: the tail just flushed is its own, not
    // delay the world skipped while it waits.
    if (park && sl.causal_external) sl.causal_ext_base += own;
    // A yield (or preemption) in the site leaves the actor runnable: the
    // run-queue wait ahead is wall time in the site that on-CPU
    // attribution skips. Parks are not counted: blocked time is forgiven.
    if (!park && sl.causal_site == decode(word).site) sl.causal_stamp = ticks();
}

void resumed(scheduler& s, slot& sl, bool after_park) noexcept {
    const std::uint64_t now = ticks();
    const bool external = std::exchange(sl.causal_external, false);
    const std::uint64_t stamp = std::exchange(sl.causal_stamp, 0);
    std::uint64_t in_site_wait = 0;  // its own wait's share of the global ledger
    if (external && after_park) {
        // A wait on the world outside from inside the site (a blocking-pool
        // fdatasync, a socket to a database) is the site's own time: if it
        // were p% faster the wait would be p% shorter. Its share accrued as
        // it passed (accrue); it is not owed by the waiter itself.
        const std::uint64_t word = experiment.load(std::memory_order_relaxed);
        if (word != 0 && stamp != 0 && stamp >= window_start.load(std::memory_order_relaxed)) {
            const std::uint64_t pct = decode(word).pct;
            accrue(now, pct);
            waiters.fetch_sub(1, std::memory_order_relaxed);
            in_site_wait = now > stamp ? (now - stamp) * pct / 100 : 0;
            add(g.outside_n, 1);
        }
    } else if (const std::uint64_t d = stamp; d != 0) {
        // Counted only within the window that opened the gap (a begin()
        // since moved window_start past it; an end() cleared the word).
        const std::uint64_t word = experiment.load(std::memory_order_relaxed);
        if (word != 0 && d >= window_start.load(std::memory_order_relaxed) && now > d) {
            add(g.offcpu, std::min(now - d, max_sample()) * decode(word).pct / 100);
            add(g.offcpu_n, 1);
        }
    }
    // Waiting on another actor or a (virtual-time) timer is never penalised:
    // the waker ran in the same slowed timeline, so the actor owes nothing
    // of its own. The world outside did not slow down, so a wait on it
    // leaves the actor owing the delay injected meanwhile (Coz's rule for
    // threads woken by the kernel rather than by another thread); only
    // what accrued in the current window counts.
    if (after_park && !external) {
        if (sl.causal_debt != 0) add(g.forgiven, std::exchange(sl.causal_debt, 0));
    } else if (after_park) {
        const std::uint32_t win = window_epoch.load(std::memory_order_relaxed);
        const std::uint64_t from =
            std::max(sl.causal_ext_base, window_base.load(std::memory_order_relaxed));
        // Its own in-site wait is not owed (attributed above).
        const std::uint64_t g_now = global_delay.load(std::memory_order_relaxed);
        const std::uint64_t now_owed = g_now > in_site_wait ? g_now - in_site_wait : 0;
        if (sl.causal_debt_window != win) {
            add(g.forgiven, sl.causal_debt);
            sl.causal_debt = 0;
            sl.causal_debt_window = win;
        }
        if (now_owed > from) sl.causal_debt += now_owed - from;
    }
    s.causal_mark = now;
}

void wait_begins(slot& sl) noexcept {
    const std::uint64_t word = experiment.load(std::memory_order_relaxed);
    if (word == 0 || sl.causal_site != decode(word).site) return;
    const std::uint64_t now = ticks();
    accrue(now, decode(word).pct);  // what passed so far is the other waiters'
    waiters.fetch_add(1, std::memory_order_relaxed);
    sl.causal_stamp = now;
}

void wait_abandoned(slot& sl) noexcept {
    const std::uint64_t stamp = std::exchange(sl.causal_stamp, 0);
    const std::uint64_t word = experiment.load(std::memory_order_relaxed);
    if (word == 0 || stamp < window_start.load(std::memory_order_relaxed)) return;
    accrue(ticks(), decode(word).pct);
    waiters.fetch_sub(1, std::memory_order_relaxed);
}

void idle(scheduler& s) noexcept {
    const std::uint64_t g_now = global_delay.load(std::memory_order_relaxed);
    if (s.causal_delay < g_now) {
        add(g.forgiven, g_now - s.causal_delay);
        s.causal_delay = g_now;
    }
}

}  // namespace smarm::internal::causal_hooks

namespace smarm::causal {

using namespace smarm::internal;
namespace hooks = smarm::internal::causal_hooks;

namespace {

std::mutex g_sites_mu;
std::deque<std::string> g_sites;  // guarded by g_sites_mu; id = index + 1

slot* running_slot() noexcept {
    scheduler* s = current_scheduler();
    return s == nullptr ? nullptr : s->current;
}

/// The running actor's site changes from `from` to `to`.
void transition(slot& sl, site_id from, site_id to) noexcept {
    const std::uint64_t word = hooks::experiment.load(std::memory_order_relaxed);
    if (word == 0 || from == to) return;
    scheduler* s = current_scheduler();
    const auto target = static_cast<site_id>(word >> 32);
    if (from == target) {  // leaving (the slot still says so): the tail counts
        hooks::site_exit(*s, sl);
    } else if (to == target) {
        s->causal_mark = ticks();  // entering: nothing before counts
    }
}

}  // namespace

site_id register_site(std::string_view name) {
    std::lock_guard lk(g_sites_mu);
    auto it = std::find(g_sites.begin(), g_sites.end(), name);
    if (it != g_sites.end()) return static_cast<site_id>(it - g_sites.begin()) + 1;
    g_sites.emplace_back(name);
    return static_cast<site_id>(g_sites.size());
}

std::string site_name(site_id id) {
    std::lock_guard lk(g_sites_mu);
    return id == 0 || id > g_sites.size() ? std::string() : g_sites[id - 1];
}

site_id current_site() noexcept {
    slot* sl = running_slot();
    return sl == nullptr ? 0 : sl->causal_site;
}

site_guard::site_guard(site_id site) noexcept : slot_(running_slot()) {
    if (slot_ == nullptr) return;
    prev_ = slot_->causal_site;
    transition(*slot_, prev_, site);
    slot_->causal_site = site;
}

site_guard::~site_guard() {
    if (slot_ == nullptr) return;
    const site_id now_in = slot_->causal_site;
    transition(*slot_, now_in, prev_);
    slot_->causal_site = prev_;
}

handoff_guard::handoff_guard(site_id site) noexcept : slot_(running_slot()) {
    if (slot_ == nullptr) return;
    if (site != 0 && !detail::causal_handoff_used.load(std::memory_order_relaxed))
        detail::causal_handoff_used.store(true, std::memory_order_relaxed);
    prev_ = std::exchange(slot_->causal_handoff, site);
}

handoff_guard::~handoff_guard() {
    if (slot_ != nullptr) slot_->causal_handoff = prev_;
}

void begin(site_id site, unsigned speedup_pct) {
    if (site == 0 || site_name(site).empty())
        throw std::invalid_argument("smarm::causal::begin: unknown site " + std::to_string(site));
    if (speedup_pct > 100)
        throw std::invalid_argument("smarm::causal::begin: speedup " + std::to_string(speedup_pct) +
                                    "% is over 100%");
    (void)ticks_per_ns();  // calibrated before any window, never inside one
    hooks::window_start.store(ticks(), std::memory_order_relaxed);
    hooks::window_epoch.fetch_add(1, std::memory_order_relaxed);
    // A wait begun in an earlier window is not this one's (its resume sees
    // a stamp before window_start and leaves the count alone).
    hooks::waiters.store(0, std::memory_order_relaxed);
    hooks::wait_mark.store(ticks(), std::memory_order_relaxed);
    // relaxed: read at samples after the experiment word below is seen; a
    // sample that reads a stale base forgives less, once.
    hooks::window_base.store(hooks::global_delay.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
    detail::hook_bits.fetch_or(detail::hook_causal, std::memory_order_relaxed);
    hooks::experiment.store((std::uint64_t{site} << 32) | speedup_pct, std::memory_order_relaxed);
}

void end() noexcept {
    hooks::experiment.store(0, std::memory_order_relaxed);
}

bool running() noexcept {
    return hooks::experiment.load(std::memory_order_relaxed) != 0;
}

ledger ledger::operator-(const ledger& b) const noexcept {
    return {injected - b.injected,       injected_n - b.injected_n,     absorbed - b.absorbed,
            forgiven - b.forgiven,       tail_park - b.tail_park,       tail_park_n - b.tail_park_n,
            tail_yield - b.tail_yield,   tail_yield_n - b.tail_yield_n, discarded - b.discarded,
            discarded_n - b.discarded_n, unarmed_n - b.unarmed_n,       offcpu - b.offcpu,
            offcpu_n - b.offcpu_n,       outside - b.outside,           outside_n - b.outside_n};
}

ledger totals() noexcept {
    auto r = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
    const auto& c = hooks::g;
    return {r(c.injected),    r(c.injected_n), r(c.absorbed),     r(c.forgiven),  r(c.tail_park),
            r(c.tail_park_n), r(c.tail_yield), r(c.tail_yield_n), r(c.discarded), r(c.discarded_n),
            r(c.unarmed_n),   r(c.offcpu),     r(c.offcpu_n),     r(c.outside),   r(c.outside_n)};
}

std::uint64_t global_delay() noexcept {
    return hooks::global_delay.load(std::memory_order_relaxed);
}

std::uint64_t core_delay() noexcept {
    scheduler* s = current_scheduler();
    return s == nullptr || s->current == nullptr ? 0 : s->causal_delay;
}

std::uint64_t my_debt() noexcept {
    slot* sl = running_slot();
    return sl == nullptr ? 0 : sl->causal_debt;
}

void inject_for_test(std::uint64_t ticks) noexcept {
    detail::hook_bits.fetch_or(detail::hook_causal, std::memory_order_relaxed);
    hooks::global_delay.fetch_add(ticks, std::memory_order_relaxed);
}

double ticks_to_ns(std::uint64_t t) noexcept {
    return static_cast<double>(t) / ticks_per_ns();
}

}  // namespace smarm::causal

namespace smarm::detail {
causal::site_id causal_handoff_lookup() noexcept {
    internal::scheduler* s = internal::current_scheduler();
    return s == nullptr || s->current == nullptr ? 0 : s->current->causal_handoff;
}
}  // namespace smarm::detail
