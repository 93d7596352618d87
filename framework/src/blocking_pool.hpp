#pragma once
// The blocking pool (blocking_pool.cpp): OS threads that run the jobs
// block_on_io hands them (file IO, name resolution, anything that would
// block a scheduler thread), one FIFO of jobs under one mutex.
//
// A job records its own result and unparks its actor; the runtime's
// io_outstanding counter (incremented by the submitter before submit,
// decremented by the job before it unparks) keeps the run from ending
// under a job in flight (io_driver.hpp's design note). stop() lets the
// threads finish the queued jobs and joins them.

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <smarm/detail/unique_function.hpp>

#include "internal.hpp"

namespace smarm::internal {

class blocking_pool {
  public:
    /// Starts `threads` threads named smarm-pool-N.
    explicit blocking_pool(unsigned threads);
    ~blocking_pool() { stop(); }
    blocking_pool(const blocking_pool&) = delete;
    blocking_pool& operator=(const blocking_pool&) = delete;

    /// Queues `job` for the next free thread.
    void submit(unique_function job);
    /// Runs what is queued, then joins the threads; idempotent.
    void stop() noexcept;

  private:
    void loop();

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<unique_function> jobs_;  // guarded by mu_
    bool stopping_ = false;             // guarded by mu_
    std::vector<std::thread> threads_;  // the constructor's and stop()'s only
};

}  // namespace smarm::internal
