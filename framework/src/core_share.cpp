#include "core_share.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>

namespace smarm::internal {

core_share::core_share(unsigned usable, unsigned max_cap) noexcept
    : usable_(std::max(usable, 1u)),
      max_cap_(std::max(max_cap, 1u)),
      ns_per_tick_(1e9 / static_cast<double>(std::max(sysconf(_SC_CLK_TCK), 1L))),
      cap_(max_cap_),
      pending_(max_cap_) {
    stat_fd_ = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
}

core_share::~core_share() {
    if (stat_fd_ >= 0) ::close(stat_fd_);
}

unsigned core_share::cap_for(double others_cores, unsigned usable, unsigned max_cap) noexcept {
    const double left = static_cast<double>(usable) - std::max(others_cores, 0.0);
    const double rounded = std::floor(left + 0.5);
    if (rounded < 1.0) return 1;
    return std::min(static_cast<unsigned>(rounded), std::max(max_cap, 1u));
}

bool core_share::spin_for(double others_cores, double self_busy_cores, unsigned usable) noexcept {
    const double idle =
        static_cast<double>(usable) - std::max(others_cores, 0.0) - std::max(self_busy_cores, 0.0);
    return idle >= 0.5;
}

bool core_share::read(std::uint64_t& busy_ticks, std::uint64_t& self_ns) noexcept {
    // The first line: "cpu  user nice system idle iowait irq softirq steal ...".
    char buf[256];
    const ssize_t n = ::pread(stat_fd_, buf, sizeof buf - 1, 0);
    if (n <= 4) return false;
    buf[n] = '\0';
    char* p = buf + 3;
    std::uint64_t f[8] = {};
    for (auto& v : f) {
        char* end = nullptr;
        v = std::strtoull(p, &end, 10);
        if (end == p) return false;
        p = end;
    }
    busy_ticks = f[0] + f[1] + f[2] + f[5] + f[6] + f[7];  // all but idle and iowait
    timespec ts{};
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return false;
    self_ns = static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
              static_cast<std::uint64_t>(ts.tv_nsec);
    return true;
}

core_share::verdict core_share::sample(std::uint64_t now_ns, std::uint64_t spun_ns) noexcept {
    if (stat_fd_ < 0) return {max_cap_, true};
    if (last_ns_ != 0 && now_ns - last_ns_ < window_ns) return {cap_, spin_};
    std::uint64_t busy = 0, self = 0;
    if (!read(busy, self)) return {cap_, spin_};
    if (last_ns_ != 0 && busy >= last_busy_ && self >= last_self_ && spun_ns >= last_spun_) {
        const double wall = static_cast<double>(now_ns - last_ns_);
        const double all = static_cast<double>(busy - last_busy_) * ns_per_tick_;
        const double mine = static_cast<double>(self - last_self_);
        const double others = (all - mine) / wall;
        const double spun = static_cast<double>(spun_ns - last_spun_);
        const unsigned want = cap_for(others, usable_, max_cap_);
        if (want == pending_) cap_ = want;  // two windows in a row agree
        pending_ = want;
        const bool spin = spin_for(others, (mine - spun) / wall, usable_);
        if (spin == pending_spin_) spin_ = spin;
        pending_spin_ = spin;
    }
    last_ns_ = now_ns;
    last_busy_ = busy;
    last_self_ = self;
    last_spun_ = spun_ns;
    return {cap_, spin_};
}

}  // namespace smarm::internal
