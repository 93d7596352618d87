// The public IO entry points over the runtime's io_driver.

#include <smarm/io.hpp>

#include <smarm/runtime.hpp>

#include <stdexcept>

#include "causal.hpp"
#include "io_driver.hpp"
#include "runtime_impl.hpp"
#include "trace_hooks.hpp"

namespace smarm::detail {

using namespace smarm::internal;

io_driver& current_io(const char* call) {
    return actor_scheduler(call).rt->io();
}

poll_desc* io_open(io_driver& d, int fd, bool persistent) {
    return d.open(fd, persistent);
}
void io_close(io_driver& d, poll_desc* pd) noexcept {
    d.close(pd);
}

bool io_wait(io_driver& d, poll_desc* pd, io_dir dir, std::optional<std::chrono::nanoseconds> t) {
    std::optional<clock::time_point> deadline;
    if (t) deadline = clock::now() + *t;
    return d.wait(pd, static_cast<int>(dir), deadline);
}

bool io_ready_or_register(io_driver& d, poll_desc* pd, io_dir dir, pid self, std::uint32_t epoch) {
    return d.ready_or_register(pd, static_cast<int>(dir), self, epoch);
}

void io_unregister(io_driver& d, poll_desc* pd, io_dir dir, pid self,
                   std::uint32_t epoch) noexcept {
    d.unregister(pd, static_cast<int>(dir), self, epoch);
}

bool io_persistent_sockets(io_driver& d) noexcept {
    return d.persistent_sockets();
}

void io_submit(unique_function job) {
    io_driver& d = current_io("smarm::block_on_io");
    runtime_impl& rt = *current_scheduler()->rt;
    // Before the submit: the verdict must never see the job vanish.
    rt.io_outstanding.fetch_add(1, std::memory_order_acq_rel);
    if (trace_hooks::on()) [[unlikely]] {
        // The job's run is a slice on the pool thread's track, named by
        // the actor waiting for it (a wrapper only while tracing).
        const std::uint64_t who = trace_hooks::word(current_pid("smarm::block_on_io"));
        job = [inner = std::move(job), who]() mutable {
            trace_hooks::record(trace_hooks::kind::job_begin, 0, 0, 0, who, 0);
            inner();
            trace_hooks::record(trace_hooks::kind::job_end, 0, 0, 0, who, 0);
        };
    }
    d.submit(std::move(job));
    causal_hooks::on_external_wait(*current_scheduler()->current);
}

void io_job_collected() noexcept {
    if (scheduler* s = current_scheduler(); s != nullptr && s->current != nullptr)
        causal_hooks::end_external_wait(*s->current);
}

void io_job_finished(pid waiter, std::uint32_t epoch) noexcept {
    runtime_impl* rt = active_runtime();
    if (rt == nullptr) return;
    rt->io_outstanding.fetch_sub(1, std::memory_order_acq_rel);
    if (waiter.valid()) rt->unpark_at(waiter, epoch, nullptr);
    // The waiter may be gone (stopped meanwhile): then this decrement may be
    // what ends the run, and every scheduler could be parked.
    rt->io_settled();
}

}  // namespace smarm::detail

namespace smarm {

namespace {
bool wait_fd(int fd, io_dir dir, std::optional<std::chrono::nanoseconds> timeout) {
    auto& d =
        detail::current_io(dir == io_dir::read ? "smarm::wait_readable" : "smarm::wait_writable");
    detail::poll_desc* pd = d.open(fd, false);
    struct closer {
        detail::io_driver& d;
        detail::poll_desc* pd;
        ~closer() { d.close(pd); }
    } c{d, pd};
    return detail::io_wait(d, pd, dir, timeout);
}
}  // namespace

bool wait_readable(int fd, std::optional<std::chrono::nanoseconds> timeout) {
    return wait_fd(fd, io_dir::read, timeout);
}

bool wait_writable(int fd, std::optional<std::chrono::nanoseconds> timeout) {
    return wait_fd(fd, io_dir::write, timeout);
}

fd_arm::fd_arm(int fd, io_dir dir)
    : d_(&detail::current_io("smarm::fd_arm")), pd_(d_->open(fd, false)), src_(*d_, pd_, dir) {}

fd_arm::~fd_arm() {
    d_->close(pd_);
}

}  // namespace smarm
