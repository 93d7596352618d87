// The tracer (include/smarm/trace.hpp): per-thread rings, the session that
// owns them, and the Chrome trace-event export.
//
// Invariants:
// - A ring is written only by its thread (record), and (re)initialised
//   only by that thread, under g.mu, when it sees a new session (attach).
//   Readers (export) hold g.mu, so a ring is never reset or freed under a
//   reader; a ring is freed only after its thread ended (orphan) and only by
//   start(), under g.mu.
// - The write protocol per event: `claimed` = i + 1, the four words, then
//   `head` = i + 1, all release stores from the one writer. A reader copies
//   [head - cap, head) with acquire loads and then reads `claimed`: an event
//   i < claimed - cap may have been overwritten during the copy and is
//   discarded (counted as dropped). If the reader saw any word of event
//   j's write, the release on that word makes claimed >= j + 1 visible to
//   the later acquire, so the slot it overwrote is discarded: no torn event
//   is kept. (Release stores and acquire loads are plain moves on x86-64.)
// - detail::hook_trace gates every event site (relaxed); g.session (acquire
//   by writers, bumped under g.mu) tells a writer its ring is stale.

#include <smarm/trace.hpp>

#include <smarm/detail/bump.hpp>
#include <smarm/detail/spinlock.hpp>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "json_text.hpp"
#include "names.hpp"
#include "runtime_impl.hpp"
#include "scheduler.hpp"
#include "trace_hooks.hpp"

namespace smarm::internal {

namespace {

using trace_hooks::kind;

constexpr std::size_t words_per_event = 4;
constexpr std::size_t event_bytes = words_per_event * sizeof(std::uint64_t);

struct trace_ring {
    // Atomic through std::atomic_ref: `new uint64_t[]` leaves the pages
    // untouched (an array of std::atomic would be zeroed, ~3 ms for 8 MiB,
    // on the recording thread at its first event).
    std::unique_ptr<std::uint64_t[]> words;
    std::uint64_t cap = 0;   // events, a power of two
    std::uint64_t mask = 0;  // cap - 1
    std::atomic<std::uint64_t> claimed{0};
    std::atomic<std::uint64_t> head{0};
    std::atomic<std::uint64_t> refused{0};  // a full ring, not flight: events not written
    std::uint64_t session = 0;              // written by the owner under g.mu
    bool flight = false;                    // written by the owner under g.mu
    bool orphan = false;                    // guarded by g.mu: its thread ended
    std::string name;                       // guarded by g.mu
    unsigned track = 0;                     // guarded by g.mu: the JSON tid
};

struct globals {
    std::mutex mu;
    std::atomic<std::uint64_t> session{0};                 // 0: never started
    trace::options opts;                                   // guarded by mu
    std::vector<std::unique_ptr<trace_ring>> rings;        // guarded by mu
    std::unordered_map<std::uint64_t, std::string> names;  // guarded by mu: pid word -> name
    unsigned next_track = 1;                               // guarded by mu
    std::uint64_t t0 = 0;                                  // guarded by mu: ticks at start
    std::atomic<std::uint32_t> next_flow{1};

    std::mutex str_mu;
    std::deque<std::string> strings;                          // guarded by str_mu; id = index + 1
    std::unordered_map<std::string_view, std::uint32_t> ids;  // guarded by str_mu
};
// Never destroyed: threads and atexit handlers may record or export after
// static destructors would have run.
globals& g = *new globals;

/// The calling thread's tracer state. A ring outlives its thread (the
/// export of a finished run reads it); the thread's end marks it an orphan.
struct thread_state {
    trace_ring* r = nullptr;
    std::string name;
    std::uint32_t flow_next = 0, flow_end = 0;
    ~thread_state() {
        if (r == nullptr) return;
        std::lock_guard lk(g.mu);
        r->orphan = true;
    }
};

// Opaque: an actor calling this may resume on another thread (spinlock.hpp).
SMARM_OPAQUE_CALL thread_state& self() noexcept {
    thread_local thread_state t;
    return t;
}

std::size_t round_up_pow2(std::size_t v) {
    std::size_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

std::string default_thread_name() {
    char b[32] = {};
    if (pthread_getname_np(pthread_self(), b, sizeof b) == 0 && b[0] != '\0') return b;
    return "thread " + std::to_string(static_cast<long>(::syscall(SYS_gettid)));
}

/// The calling thread's ring for `session`, made or reset (allocates: once
/// per thread and session). Null when recording stopped meanwhile.
[[gnu::noinline]] trace_ring* attach(thread_state& t, std::uint64_t session) noexcept {
    try {
        std::lock_guard lk(g.mu);
        if (!detail::trace_active() || g.session.load(std::memory_order_relaxed) != session)
            return nullptr;
        const std::uint64_t cap = round_up_pow2(g.opts.buffer_bytes / event_bytes);
        if (t.r == nullptr) {
            g.rings.push_back(std::make_unique<trace_ring>());
            t.r = g.rings.back().get();
        }
        trace_ring& r = *t.r;
        if (r.cap != cap) {
            r.words.reset();  // the old buffer goes before the new one comes
            r.words.reset(new std::uint64_t[cap * words_per_event]);
            r.cap = cap;
            r.mask = cap - 1;
        }
        r.claimed.store(0, std::memory_order_relaxed);
        r.head.store(0, std::memory_order_relaxed);
        r.refused.store(0, std::memory_order_relaxed);
        r.flight = g.opts.flight;
        r.name = t.name.empty() ? default_thread_name() : t.name;
        r.track = g.next_track++;
        r.session = session;
        return &r;
    } catch (...) {  // out of memory: this thread records nothing
        return nullptr;
    }
}

pid current_actor() noexcept {
    scheduler* s = current_scheduler();
    if (s == nullptr || s->current == nullptr) return pid{};
    return pid{s->current->index, s->current_gen};
}

}  // namespace

namespace trace_hooks {

void record(kind k, std::uint8_t sub, std::uint16_t extra, std::uint32_t x, std::uint64_t a,
            std::uint64_t b) noexcept {
    thread_state& t = self();
    trace_ring* r = t.r;
    const std::uint64_t session = g.session.load(std::memory_order_acquire);
    if (r == nullptr || r->session != session) [[unlikely]] {
        r = attach(t, session);
        if (r == nullptr) return;
    }
    const std::uint64_t i = r->head.load(std::memory_order_relaxed);
    if (i >= r->cap && !r->flight) {
        detail::bump(r->refused);
        return;
    }
    std::uint64_t* w = &r->words[(i & r->mask) * words_per_event];
    const std::uint64_t head = std::uint64_t{static_cast<std::uint8_t>(k)} |
                               std::uint64_t{sub} << 8 | std::uint64_t{extra} << 16 |
                               std::uint64_t{x} << 32;
    r->claimed.store(i + 1, std::memory_order_release);
    std::atomic_ref(w[0]).store(detail::ticks(), std::memory_order_release);
    std::atomic_ref(w[1]).store(head, std::memory_order_release);
    std::atomic_ref(w[2]).store(a, std::memory_order_release);
    std::atomic_ref(w[3]).store(b, std::memory_order_release);
    r->head.store(i + 1, std::memory_order_release);
}

void left(scheduler& s, const slot& sl, switch_reason why, detail::wait_reason wr,
          std::uint32_t arg) noexcept {
    leave l = leave::park;
    switch (why) {
        case switch_reason::yield:
            l = s.trace_voluntary ? leave::yield : leave::preempted;
            s.trace_voluntary = false;
            break;
        case switch_reason::park:
            l = leave::park;
            break;
        case switch_reason::finish:
            l = leave::finish;
            break;
        case switch_reason::handoff:
            l = leave::handoff;
            break;
    }
    if (l != leave::park) {
        wr = detail::wait_reason::other;
        arg = 0;
    }
    record(kind::run_end, static_cast<std::uint8_t>(l), static_cast<std::uint16_t>(wr), arg,
           word(pid{sl.index, s.current_gen}), 0);
}

void start_from_env() noexcept {
    static std::once_flag once;
    std::call_once(once, [] {
        const char* path = std::getenv("SMARM_TRACE");
        if (path == nullptr || *path == '\0') return;
        static std::string out;  // for the atexit handler
        out = path;
        trace::options o;
        if (const char* b = std::getenv("SMARM_TRACE_BUFFER"); b != nullptr && *b != '\0') {
            // Bytes, or with K, M or G (KiB, MiB, GiB), as config files write sizes.
            char* end = nullptr;
            const unsigned long long v = std::strtoull(b, &end, 10);
            std::size_t shift = 0;
            const std::string unit(end);
            if (unit == "K" || unit == "KiB")
                shift = 10;
            else if (unit == "M" || unit == "MiB")
                shift = 20;
            else if (unit == "G" || unit == "GiB")
                shift = 30;
            else if (!unit.empty())
                o.buffer_bytes = 0;  // refused below, named
            if (o.buffer_bytes != 0) o.buffer_bytes = static_cast<std::size_t>(v) << shift;
        }
        try {
            trace::start(o);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "smarm: SMARM_TRACE: %s (SMARM_TRACE_BUFFER=%s)\n", e.what(),
                         std::getenv("SMARM_TRACE_BUFFER"));
            return;
        }
        std::atexit([] {
            trace::stop();
            try {
                const trace::summary s = trace::dump(out);
                std::fprintf(stderr,
                             "smarm: trace of %llu events (%llu dropped, %llu cut) written to %s\n",
                             static_cast<unsigned long long>(s.events),
                             static_cast<unsigned long long>(s.dropped),
                             static_cast<unsigned long long>(s.cut), out.c_str());
            } catch (const std::exception& e) {
                std::fprintf(stderr, "smarm: SMARM_TRACE: %s\n", e.what());
            }
        });
    });
}

void sample_counters(scheduler& s) noexcept {
    static const std::uint64_t period = static_cast<std::uint64_t>(1e6 * ticks_per_ns());  // 1 ms
    const std::uint64_t now = detail::ticks();
    if (now - s.trace_sampled < period) return;
    s.trace_sampled = now;
    record(kind::counter, static_cast<std::uint8_t>(counter::run_queue), 0, s.id,
           s.rt->queued_count(), 0);
    record(kind::counter, static_cast<std::uint8_t>(counter::live_actors), 0, 0, s.rt->live_count(),
           0);
}

}  // namespace trace_hooks

// ---- export ----

namespace {

struct rec {
    std::uint64_t ts;
    unsigned track;
    kind k;
    std::uint8_t sub;
    std::uint16_t extra;
    std::uint32_t x;
    std::uint64_t a, b;
};

struct track_info {
    unsigned id;
    std::string name;
};

struct snapshot_data {
    std::vector<rec> recs;
    std::vector<track_info> tracks;
    std::unordered_map<std::uint64_t, std::string> names;
    std::uint64_t dropped = 0;
    std::uint64_t t0 = 0;
    bool flight = false;
    std::size_t buffer_bytes = 0;
    bool started = false;
};

/// Copies ring `r` (caller holds g.mu) into `out`.
void copy_ring(const trace_ring& r, snapshot_data& out) {
    const std::uint64_t h1 = r.head.load(std::memory_order_acquire);
    const std::uint64_t lo = h1 > r.cap ? h1 - r.cap : 0;
    const std::size_t first = out.recs.size();
    out.recs.resize(first + (h1 - lo));
    // Newest first: a writer still running overwrites the oldest, which are
    // then the ones read last (and discarded below), not the whole window.
    for (std::uint64_t i = h1; i-- > lo;) {
        std::uint64_t* w = &r.words[(i & r.mask) * words_per_event];
        const std::uint64_t ts = std::atomic_ref(w[0]).load(std::memory_order_acquire);
        const std::uint64_t head = std::atomic_ref(w[1]).load(std::memory_order_acquire);
        const std::uint64_t a = std::atomic_ref(w[2]).load(std::memory_order_acquire);
        const std::uint64_t b = std::atomic_ref(w[3]).load(std::memory_order_acquire);
        out.recs[first + (i - lo)] = rec{ts,
                                         r.track,
                                         static_cast<kind>(head & 0xff),
                                         static_cast<std::uint8_t>(head >> 8),
                                         static_cast<std::uint16_t>(head >> 16),
                                         static_cast<std::uint32_t>(head >> 32),
                                         a,
                                         b};
    }
    // Whatever the writer may have overwritten while we copied is not kept.
    const std::uint64_t claimed = r.claimed.load(std::memory_order_acquire);
    const std::uint64_t valid_from = std::max(lo, claimed > r.cap ? claimed - r.cap : 0);
    const std::uint64_t stale = std::min(valid_from - lo, h1 - lo);
    out.recs.erase(out.recs.begin() + static_cast<std::ptrdiff_t>(first),
                   out.recs.begin() + static_cast<std::ptrdiff_t>(first + stale));
    out.dropped += r.refused.load(std::memory_order_relaxed) + (lo + stale);
}

snapshot_data take() {
    snapshot_data d;
    std::lock_guard lk(g.mu);
    const std::uint64_t session = g.session.load(std::memory_order_relaxed);
    d.started = session != 0;
    d.t0 = g.t0;
    d.flight = g.opts.flight;
    d.buffer_bytes = g.opts.buffer_bytes;
    d.names = g.names;
    for (const auto& r : g.rings) {
        if (r->session != session || session == 0) continue;
        copy_ring(*r, d);
        d.tracks.push_back({r->track, r->name});
    }
    return d;
}

std::string pid_text(std::uint64_t w) {
    return pid{static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(w >> 32)}.to_string();
}

const char* wait_name(std::uint16_t r) {
    return detail::to_string(static_cast<detail::wait_reason>(r));
}

const char* leave_name(std::uint8_t l) {
    switch (static_cast<trace_hooks::leave>(l)) {
        case trace_hooks::leave::yield:
            return "yield";
        case trace_hooks::leave::preempted:
            return "preempted";
        case trace_hooks::leave::park:
            return "park";
        case trace_hooks::leave::finish:
            return "finish";
        case trace_hooks::leave::handoff:
            return "handoff";
    }
    return "?";
}

const char* exit_name(std::uint8_t e) {
    switch (static_cast<exit_kind>(e)) {
        case exit_kind::exit:
            return "normal";
        case exit_kind::panic:
            return "exception";
        case exit_kind::stopped:
            return "stopped";
    }
    return "?";
}

/// Renders the events in time order into `body`, recording where each
/// event starts (the size cap cuts at one of them).
class renderer {
  public:
    renderer(const snapshot_data& d, const std::deque<std::string>& strings)
        : d_(d), strings_(strings), pid_(static_cast<long>(::getpid())) {
        tpn_ = ticks_per_ns();
    }

    void run(std::vector<rec>& recs) {
        body.reserve(recs.size() * 160);  // ~150 bytes of JSON per record
        starts.reserve(recs.size() * 3 / 2);
        std::unordered_set<std::uint32_t> sent, received;
        for (const rec& r : recs) {
            if (r.k == kind::send && r.sub == 0) sent.insert(r.x);
            if (r.k == kind::recv) received.insert(r.x);
        }
        for (const rec& r : recs) {
            if (r.k == kind::send && received.count(r.x)) flows_.insert(r.x);
            first_ts_.try_emplace(r.track, r.ts);
        }
        for (const rec& r : recs)
            one(r);
        const std::uint64_t end = recs.empty() ? d_.t0 : recs.back().ts;
        for (auto& [track, run] : runs_)
            if (run.open) slice(track, run, end, nullptr);
        // A job whose end came after the export began (it wakes its actor
        // before it records its end) runs to the trace's end.
        for (auto& [track, job] : jobs_)
            if (job.open) job_slice(track, job, end);
        for (auto& [w, a] : actors_)
            close_actor(w, a, end, recs.empty() ? 0 : recs.back().track, nullptr);
    }

    std::string body;
    std::vector<std::size_t> starts;  // offset of each event in body

  private:
    struct run_state {
        bool open = false;
        std::uint64_t pid = 0;
        std::uint64_t begin = 0;
    };
    struct actor_state {
        bool waiting = false;
        unsigned spans = 0;
    };

    void one(const rec& r) {
        switch (r.k) {
            case kind::run_begin: {
                actor_state& a = actor(r.a, r.ts, r.track);
                if (a.waiting) {
                    async('e', r.a, "wait", r.ts, r.track, "");
                    a.waiting = false;
                }
                run_state& run = runs_[r.track];
                if (run.open) slice(r.track, run, r.ts, nullptr);  // an end we lost
                run = {true, r.a, r.ts};
                // Messages handed to its slot while it was parked: this run
                // receives them.
                if (auto h = handed_.find(r.a); h != handed_.end()) {
                    for (const rec& sent : h->second) {
                        const std::uint32_t id = next_handoff_id_++;
                        flow('s', sent, id);
                        flow('f', r, id);
                    }
                    handed_.erase(h);
                }
                break;
            }
            case kind::run_end: {
                run_state& run = runs_[r.track];
                if (!run.open || run.pid != r.a) run = {true, r.a, first_ts_[r.track]};
                slice(r.track, run, r.ts, &r);
                if (static_cast<trace_hooks::leave>(r.sub) == trace_hooks::leave::park) {
                    actor_state& a = actor(r.a, r.ts, r.track);
                    std::string args = "\"reason\":" + json_string(wait_name(r.extra));
                    if (r.extra == static_cast<std::uint16_t>(detail::wait_reason::io_read) ||
                        r.extra == static_cast<std::uint16_t>(detail::wait_reason::io_write))
                        args += ",\"fd\":" + std::to_string(r.x);
                    async('b', r.a, std::string("wait: ") + wait_name(r.extra), r.ts, r.track,
                          args);
                    a.waiting = true;
                }
                break;
            }
            case kind::spawn:
                actor(r.a, r.ts, r.track, r.b);
                break;
            case kind::exit: {
                auto it = actors_.find(r.a);
                if (it == actors_.end()) actor(r.a, r.ts, r.track);
                it = actors_.find(r.a);
                close_actor(it->first, it->second, r.ts, r.track, exit_name(r.sub));
                actors_.erase(it);
                break;
            }
            case kind::send:
                if (r.sub == 1 && trace_hooks::is_pid(r.b)) {
                    handed_[r.b].push_back(r);
                } else if (flows_.count(r.x)) {
                    flow('s', r, r.x);
                }
                break;
            case kind::recv:
                if (flows_.count(r.x)) flow('f', r, r.x);
                break;
            case kind::io_ready:
                instant("io ready", r,
                        "\"fd\":" + std::to_string(r.x) + ",\"direction\":\"" +
                            (r.sub ? "write" : "read") + "\",\"pid\":\"" + pid_text(r.a) + "\"",
                        't');
                break;
            case kind::timer:
                instant("timer fired", r,
                        trace_hooks::is_pid(r.a) ? "\"pid\":\"" + pid_text(r.a) + "\""
                                                 : std::string("\"pid\":null"),
                        't');
                break;
            case kind::restart:
                instant("restart " + str(r.x), r,
                        "\"supervisor\":\"" + pid_text(r.a) + "\",\"child\":" +
                            json_string(str(r.x)) + ",\"new_pid\":\"" + pid_text(r.b) + "\"",
                        'p');
                break;
            case kind::span_begin: {
                if (!trace_hooks::is_pid(r.a)) break;  // not in an actor
                actor_state& a = actor(r.a, r.ts, r.track);
                std::string args =
                    r.b ? "\"detail\":" + json_string(str(static_cast<std::uint32_t>(r.b)))
                        : std::string();
                async('b', r.a, str(r.x), r.ts, r.track, args);
                ++a.spans;
                break;
            }
            case kind::span_end: {
                auto it = actors_.find(r.a);
                if (it == actors_.end() || it->second.spans == 0) break;  // its begin was lost
                async('e', r.a, "", r.ts, r.track,
                      "\"status\":" + std::to_string(r.x) + ",\"bytes\":" + std::to_string(r.b));
                --it->second.spans;
                break;
            }
            case kind::job_begin:
                jobs_[r.track] = {true, r.a, r.ts};
                break;
            case kind::job_end: {
                run_state& job = jobs_[r.track];
                if (!job.open || job.pid != r.a) job = {true, r.a, first_ts_[r.track]};
                job_slice(r.track, job, r.ts);
                break;
            }
            case kind::counter: {
                const bool rq =
                    static_cast<trace_hooks::counter>(r.sub) == trace_hooks::counter::run_queue;
                begin_event();
                body += "{\"ph\":\"C\",\"name\":\"";
                body += rq ? "run queue" : "live actors";
                body += "\",\"pid\":" + std::to_string(pid_) +
                        ",\"tid\":" + std::to_string(r.track) + ",\"ts\":" + us(r.ts) +
                        ",\"args\":{\"value\":" + std::to_string(r.a) + "}}";
                break;
            }
        }
    }

    /// The actor's track, opened (its lifetime's "b") at first sight.
    actor_state& actor(std::uint64_t w, std::uint64_t ts, unsigned track,
                       std::uint64_t parent = trace_hooks::no_pid) {
        auto [it, fresh] = actors_.try_emplace(w);
        if (fresh) {
            std::string args = "\"pid\":\"" + pid_text(w) + "\"";
            if (trace_hooks::is_pid(parent)) args += ",\"parent\":\"" + pid_text(parent) + "\"";
            async('b', w, label(w), ts, track, args);
        }
        return it->second;
    }

    void close_actor(std::uint64_t w, actor_state& a, std::uint64_t ts, unsigned track,
                     const char* exit) {
        if (a.waiting) async('e', w, "wait", ts, track, "");
        for (; a.spans > 0; --a.spans)
            async('e', w, "", ts, track, "");
        async('e', w, label(w), ts, track,
              exit ? std::string("\"exit\":") + json_string(exit) : std::string());
        a.waiting = false;
    }

    void slice(unsigned track, run_state& run, std::uint64_t end, const rec* why) {
        begin_event();
        body += "{\"ph\":\"X\",\"name\":" + json_string(label(run.pid)) +
                ",\"cat\":\"run\",\"pid\":" + std::to_string(pid_) +
                ",\"tid\":" + std::to_string(track) + ",\"ts\":" + us(run.begin) +
                ",\"dur\":" + dur(run.begin, end) + ",\"args\":{\"pid\":\"" + pid_text(run.pid) +
                "\"";
        if (why != nullptr) {
            body += ",\"left\":\"";
            body += leave_name(why->sub);
            body += "\"";
            if (static_cast<trace_hooks::leave>(why->sub) == trace_hooks::leave::park) {
                body += ",\"wait\":\"";
                body += wait_name(why->extra);
                body += "\"";
            }
        }
        body += "}}";
        run.open = false;
    }

    void job_slice(unsigned track, run_state& job, std::uint64_t end) {
        begin_event();
        body += "{\"ph\":\"X\",\"name\":" + json_string("job for " + label(job.pid)) +
                ",\"cat\":\"job\",\"pid\":" + std::to_string(pid_) +
                ",\"tid\":" + std::to_string(track) + ",\"ts\":" + us(job.begin) +
                ",\"dur\":" + dur(job.begin, end) + ",\"args\":{\"for\":\"" + pid_text(job.pid) +
                "\"}}";
        job.open = false;
    }

    void async(char ph, std::uint64_t w, const std::string& name, std::uint64_t ts, unsigned track,
               const std::string& args) {
        begin_event();
        body += "{\"ph\":\"";
        body += ph;
        body += "\",\"cat\":\"actor\",\"id\":\"" + hex(w) + "\",\"name\":" + json_string(name) +
                ",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(track) +
                ",\"ts\":" + us(ts);
        if (!args.empty()) body += ",\"args\":{" + args + "}";
        body += "}";
    }

    void flow(char ph, const rec& r, std::uint32_t id) {
        begin_event();
        body += "{\"ph\":\"";
        body += ph;
        body += "\",\"cat\":\"message\",\"name\":\"message\",\"id\":" + std::to_string(id) +
                ",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(r.track) +
                ",\"ts\":" + us(r.ts);
        if (ph == 'f') body += ",\"bp\":\"e\"";
        if (trace_hooks::is_pid(r.a))
            body += std::string(",\"args\":{\"") + (ph == 's' ? "from" : "to") + "\":\"" +
                    pid_text(r.a) + "\"}";
        body += "}";
    }

    void instant(const std::string& name, const rec& r, const std::string& args, char scope) {
        begin_event();
        body += "{\"ph\":\"i\",\"s\":\"";
        body += scope;
        body += "\",\"name\":" + json_string(name) + ",\"pid\":" + std::to_string(pid_) +
                ",\"tid\":" + std::to_string(r.track) + ",\"ts\":" + us(r.ts) + ",\"args\":{" +
                args + "}}";
    }

    void begin_event() {
        if (!body.empty()) body += ",\n";
        starts.push_back(body.size());
    }

    std::string label(std::uint64_t w) const {
        auto it = d_.names.find(w);
        return it != d_.names.end() ? it->second + " " + pid_text(w) : "actor " + pid_text(w);
    }
    std::string str(std::uint32_t id) const {
        return id == 0 || id > strings_.size() ? std::string("?") : strings_[id - 1];
    }
    static std::string hex(std::uint64_t w) {
        char b[24];
        std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(w));
        return b;
    }
    /// Microseconds with three decimals from whole nanoseconds (printf's
    /// %f was a fifth of the export's time).
    static std::string micros(std::int64_t ns) {
        char b[32];
        char* p = b;
        if (ns < 0) {
            *p++ = '-';
            ns = -ns;
        }
        p = std::to_chars(p, b + sizeof b, ns / 1000).ptr;
        const auto frac = static_cast<int>(ns % 1000);
        *p++ = '.';
        *p++ = static_cast<char>('0' + frac / 100);
        *p++ = static_cast<char>('0' + frac / 10 % 10);
        *p++ = static_cast<char>('0' + frac % 10);
        return std::string(b, p);
    }
    std::string us(std::uint64_t ts) const {
        return micros(
            std::llround(static_cast<double>(static_cast<std::int64_t>(ts - d_.t0)) / tpn_));
    }
    std::string dur(std::uint64_t from, std::uint64_t to) const {
        return micros(to > from ? std::llround(static_cast<double>(to - from) / tpn_) : 0);
    }

    const snapshot_data& d_;
    const std::deque<std::string>& strings_;
    long pid_;
    double tpn_ = 1.0;
    std::unordered_set<std::uint32_t> flows_;
    std::unordered_map<unsigned, std::uint64_t> first_ts_;
    std::unordered_map<unsigned, run_state> runs_;
    std::unordered_map<unsigned, run_state> jobs_;  // blocking-pool jobs, by track
    /// Hand-off sends waiting for their receiver's next run, by its pid.
    std::unordered_map<std::uint64_t, std::vector<rec>> handed_;
    std::uint32_t next_handoff_id_ = 0x80000000u;  // apart from recorded flow ids
    std::unordered_map<std::uint64_t, actor_state> actors_;
};

}  // namespace

}  // namespace smarm::internal

namespace smarm::trace {

using namespace smarm::internal;

void start(const options& opts) {
    constexpr std::size_t lo = std::size_t{64} << 10, hi = std::size_t{1} << 30;
    if (opts.buffer_bytes < lo || opts.buffer_bytes > hi)
        throw std::invalid_argument("smarm::trace::start: options::buffer_bytes " +
                                    std::to_string(opts.buffer_bytes) +
                                    " is outside 64 KiB .. 1 GiB");
    (void)ticks_per_ns();  // calibrated now, not at the first export
    // Names registered before the start (the registry's lock is never held
    // with g.mu: registering takes it first, then reports here).
    std::vector<std::tuple<pid, std::string, detail::queue_probe>> known;
    if (scheduler* s = current_scheduler(); s != nullptr && s->current != nullptr)
        known = s->rt->names().all();
    std::lock_guard lk(g.mu);
    std::erase_if(g.rings, [](const std::unique_ptr<trace_ring>& r) { return r->orphan; });
    g.opts = opts;
    g.opts.buffer_bytes = round_up_pow2(opts.buffer_bytes);
    g.names.clear();
    for (const auto& [p, n, queue] : known)
        g.names[trace_hooks::word(p)] = n;
    g.next_track = 1;
    g.t0 = detail::ticks();
    g.session.fetch_add(1, std::memory_order_release);
    detail::hook_bits.fetch_or(detail::hook_trace, std::memory_order_relaxed);
}

void stop() noexcept {
    detail::hook_bits.fetch_and(static_cast<std::uint8_t>(~detail::hook_trace),
                                std::memory_order_relaxed);
}

bool recording() noexcept {
    return detail::trace_active();
}

std::string to_json(const export_options& opts, summary* result) {
    if (opts.max_bytes < 4096)
        throw std::invalid_argument("smarm::trace: export_options::max_bytes " +
                                    std::to_string(opts.max_bytes) + " is under 4 KiB");
    snapshot_data d = take();
    summary sum;
    sum.records = d.recs.size();
    sum.dropped = d.dropped;
    sum.threads = static_cast<unsigned>(d.tracks.size());
    std::string body;
    std::vector<std::size_t> starts;
    // Time order; then only the newest records that could fit are rendered
    // (an event is at least ~60 bytes of JSON), so a small cap over big
    // rings does not build their whole JSON first.
    std::stable_sort(d.recs.begin(), d.recs.end(),
                     [](const rec& x, const rec& y) { return x.ts < y.ts; });
    std::uint64_t unrendered = 0;
    if (const std::size_t fit = opts.max_bytes / 60; d.recs.size() > fit) {
        unrendered = d.recs.size() - fit;
        d.recs.erase(d.recs.begin(), d.recs.begin() + static_cast<std::ptrdiff_t>(unrendered));
    }
    {
        std::unique_lock slk(g.str_mu);  // strings are never freed; ids stay valid
        renderer r(d, g.strings);
        r.run(d.recs);
        body = std::move(r.body);
        starts = std::move(r.starts);
    }
    const long pid = static_cast<long>(::getpid());
    std::string meta = "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid) +
                       ",\"args\":{\"name\":\"smarm\"}}";
    for (const auto& t : d.tracks)
        meta += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid) +
                ",\"tid\":" + std::to_string(t.id) + ",\"args\":{\"name\":" + json_string(t.name) +
                "}}";
    // The cap keeps the newest events: cut the body at an event start.
    constexpr std::size_t reserve = 1024;  // the head and otherData
    const std::size_t room =
        opts.max_bytes > meta.size() + reserve ? opts.max_bytes - meta.size() - reserve : 0;
    std::size_t from = 0;
    if (body.size() > room) {
        const std::size_t want = body.size() - room;
        auto it = std::lower_bound(starts.begin(), starts.end(), want);
        sum.cut = static_cast<std::uint64_t>(it - starts.begin());
        from = it == starts.end() ? body.size() : *it;
    }
    const std::uint64_t kept = starts.size() - sum.cut;
    sum.cut += unrendered;
    std::string out =
        "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"smarm\",\"mode\":\"";
    out += !d.started ? "never started" : d.flight ? "flight" : "interval";
    out += "\",\"buffer_bytes_per_thread\":" + std::to_string(d.buffer_bytes) +
           ",\"recorded_events\":" + std::to_string(sum.records) +
           ",\"dropped_events\":" + std::to_string(sum.dropped) +
           ",\"cut_events\":" + std::to_string(sum.cut) + ",\"cut\":";
    out += sum.cut == 0 ? std::string("\"none\"")
                        : json_string("the oldest " + std::to_string(sum.cut) +
                                      " trace events were left out to stay under " +
                                      std::to_string(opts.max_bytes) + " bytes");
    out += "},\n\"traceEvents\":[\n" + meta;
    if (from < body.size()) {
        out += ",\n";
        out.append(body, from, std::string::npos);
    }
    out += "\n]}\n";
    sum.events = kept + 1 + d.tracks.size();
    sum.bytes = out.size();
    if (result != nullptr) *result = sum;
    return out;
}

summary write_json(std::ostream& out, const export_options& opts) {
    summary sum;
    const std::string text = to_json(opts, &sum);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    return sum;
}

summary dump(const std::string& path, const export_options& opts) {
    summary sum;
    const std::string text = to_json(opts, &sum);
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr)
        throw std::system_error(errno, std::generic_category(), "smarm::trace::dump: " + path);
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const int err = errno;
    if (std::fclose(f) != 0 || !ok)
        throw std::system_error(ok ? errno : err, std::generic_category(),
                                "smarm::trace::dump: writing " + path);
    return sum;
}

std::uint32_t intern(std::string_view s) {
    std::lock_guard lk(g.str_mu);
    if (auto it = g.ids.find(s); it != g.ids.end()) return it->second;
    g.strings.emplace_back(s);
    const auto id = static_cast<std::uint32_t>(g.strings.size());
    g.ids.emplace(g.strings.back(), id);
    return id;
}

void name_thread(std::string_view name) {
    thread_state& t = self();
    t.name = std::string(name);
    if (t.r != nullptr) {
        std::lock_guard lk(g.mu);
        t.r->name = t.name;
    }
}

void span_begin(std::uint32_t name, std::uint32_t detail) noexcept {
    if (!detail::trace_active()) return;
    trace_hooks::record(kind::span_begin, 0, 0, name, trace_hooks::word(current_actor()), detail);
}

void span_end(std::uint32_t status, std::uint64_t bytes) noexcept {
    if (!detail::trace_active()) return;
    trace_hooks::record(kind::span_end, 0, 0, status, trace_hooks::word(current_actor()), bytes);
}

}  // namespace smarm::trace

namespace smarm::detail {

using namespace smarm::internal;

std::uint32_t trace_flow_id() noexcept {
    thread_state& t = self();
    for (;;) {
        if (t.flow_next == t.flow_end) {  // ids in blocks: one shared RMW per 1024
            t.flow_next = g.next_flow.fetch_add(1024, std::memory_order_relaxed);
            t.flow_end = t.flow_next + 1024;
        }
        // 31 bits (the renderer's own ids for hand-offs have the top bit).
        const std::uint32_t flow = t.flow_next++ & 0x7fffffffu;
        if (flow != 0) return flow;
    }
}

void trace_sent(std::uint32_t flow, pid to) noexcept {
    trace_hooks::record(kind::send, flow == 0 ? 1 : 0, 0, flow, trace_hooks::word(current_actor()),
                        trace_hooks::word(to));
}

std::uint64_t trace_send() noexcept {
    if (!trace_active()) return 0;
    const std::uint32_t flow = trace_flow_id();
    trace_sent(flow, pid{});
    return flow;
}

void trace_recv(std::uint64_t flow) noexcept {
    trace_hooks::record(kind::recv, 0, 0, static_cast<std::uint32_t>(flow),
                        trace_hooks::word(current_actor()), 0);
}

void trace_name(pid holder, std::string_view name) {
    if (!trace_active()) return;
    std::lock_guard lk(g.mu);
    g.names[trace_hooks::word(holder)] = std::string(name);
}

}  // namespace smarm::detail
