// Process signals for actors (signal.hpp): one self-pipe per live
// signal_set, written by a process-wide handler, read by the set's waiter
// through the IO layer.
//
// Invariants:
// - Slots are created once and never closed: the handler may write to any
//   slot's pipe at any time, so a descriptor it sees is never reused for
//   something else.
// - The handler touches only atomics and write(2). A slot's `wants` mask
//   is what the handler reads; it is non-zero exactly while the slot is
//   leased (relaxed: an integer is the whole publication; a delivery that
//   races the lease's start or end is either this set's or not, both fine).
// - g_mu guards the leases, pipe creation, the per-signal hold counts and
//   every sigaction call; the handler for a signal is installed while its
//   hold count is non-zero and the saved disposition is put back when it
//   drops to zero.

#include <smarm/io.hpp>
#include <smarm/signal.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

namespace smarm {

namespace {

constexpr std::size_t max_sets = 64;
constexpr int max_signal = 64;  // signal numbers fit a byte and the mask

struct slot {
    std::atomic<int> write_fd{-1};        // the handler's view; never reset
    std::atomic<std::uint64_t> wants{0};  // bit s-1 for signal s; 0 when free
    int read_fd = -1;                     // guarded by g_mu, then the lessee's
    bool leased = false;                  // guarded by g_mu
};

std::array<slot, max_sets> g_slots;
std::mutex g_mu;
std::array<int, max_signal + 1> g_holds{};               // guarded by g_mu
std::array<struct sigaction, max_signal + 1> g_saved{};  // guarded by g_mu

extern "C" void on_signal(int sig) {
    const int saved = errno;
    const std::uint64_t bit = std::uint64_t{1} << (sig - 1);
    const char b = static_cast<char>(sig);
    for (auto& s : g_slots) {
        if ((s.wants.load(std::memory_order_relaxed) & bit) == 0) continue;
        if (int fd = s.write_fd.load(std::memory_order_relaxed); fd >= 0) (void)!::write(fd, &b, 1);
    }
    errno = saved;
}

void check_catchable(int sig) {
    if (sig <= 0 || sig > max_signal || sig == SIGKILL || sig == SIGSTOP)
        throw std::invalid_argument("smarm::signal_set: signal " + std::to_string(sig) +
                                    " cannot be caught");
}

/// Caller holds g_mu.
void hold(int sig) {
    if (g_holds[sig]++ != 0) return;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(sig, &sa, &g_saved[sig]) != 0) {
        --g_holds[sig];
        throw std::system_error(errno, std::generic_category(),
                                "smarm::signal_set: sigaction(" + std::to_string(sig) + ")");
    }
}

/// Caller holds g_mu.
void release(int sig) noexcept {
    if (--g_holds[sig] == 0) (void)::sigaction(sig, &g_saved[sig], nullptr);
}

void release_mask(std::uint64_t mask) noexcept {
    for (int sig = 1; sig <= max_signal; ++sig)
        if (mask & (std::uint64_t{1} << (sig - 1))) release(sig);
}

}  // namespace

signal_set::signal_set(std::initializer_list<int> signals) {
    std::uint64_t mask = 0;
    for (int sig : signals) {
        check_catchable(sig);
        mask |= std::uint64_t{1} << (sig - 1);
    }
    if (mask == 0) throw std::invalid_argument("smarm::signal_set: no signals given");
    std::lock_guard g(g_mu);
    for (std::size_t i = 0; i < max_sets; ++i) {
        slot& s = g_slots[i];
        if (s.leased) continue;
        if (s.read_fd < 0) {
            int p[2];
            if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
                throw std::system_error(errno, std::generic_category(), "smarm::signal_set: pipe2");
            s.read_fd = p[0];
            s.write_fd.store(p[1], std::memory_order_relaxed);
        }
        char b[64];  // deliveries to the slot's previous lessee: not ours
        while (::read(s.read_fd, b, sizeof b) > 0) {
        }
        std::uint64_t held = 0;
        try {
            for (int sig = 1; sig <= max_signal; ++sig) {
                const std::uint64_t bit = std::uint64_t{1} << (sig - 1);
                if ((mask & bit) == 0) continue;
                hold(sig);
                held |= bit;
            }
        } catch (...) {
            release_mask(held);
            throw;
        }
        s.leased = true;
        s.wants.store(mask, std::memory_order_relaxed);
        slot_ = i;
        return;
    }
    throw std::runtime_error("smarm::signal_set: more than " + std::to_string(max_sets) +
                             " signal sets at once");
}

signal_set::~signal_set() {
    std::lock_guard g(g_mu);
    slot& s = g_slots[slot_];
    const std::uint64_t mask = s.wants.exchange(0, std::memory_order_relaxed);
    release_mask(mask);
    s.leased = false;
}

int signal_set::wait(std::optional<std::chrono::nanoseconds> timeout) {
    using clock = std::chrono::steady_clock;
    const int fd = g_slots[slot_].read_fd;
    const bool bounded = timeout.has_value();
    const clock::time_point deadline = bounded ? clock::now() + *timeout : clock::time_point::max();
    for (;;) {
        unsigned char b = 0;
        const ssize_t n = ::read(fd, &b, 1);
        if (n == 1) return b;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN)
            throw std::system_error(errno, std::generic_category(), "smarm::signal_set::wait");
        if (!bounded) {
            (void)wait_readable(fd);
            continue;
        }
        const auto left = deadline - clock::now();
        if (left <= std::chrono::nanoseconds::zero()) return 0;
        (void)wait_readable(fd, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    }
}

int wait_signal(std::initializer_list<int> signals) {
    signal_set s(signals);
    return s.wait();
}

}  // namespace smarm
