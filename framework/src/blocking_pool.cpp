// The blocking pool: see blocking_pool.hpp.

#include "blocking_pool.hpp"

#include <pthread.h>

#include <string>

namespace smarm::internal {

blocking_pool::blocking_pool(unsigned threads) {
    threads_.reserve(threads);
    for (unsigned i = 0; i < threads; ++i)
        threads_.emplace_back([this, i] {
            const std::string name = "smarm-pool-" + std::to_string(i);
            pthread_setname_np(pthread_self(), name.c_str());
            loop();
        });
}

void blocking_pool::submit(unique_function job) {
    {
        std::lock_guard g(mu_);
        jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
}

void blocking_pool::stop() noexcept {
    {
        std::lock_guard g(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
}

void blocking_pool::loop() {
    for (;;) {
        unique_function job;
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
            if (jobs_.empty()) return;  // stopping, and nothing left
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        job();  // the job records its own result and wakes its actor
    }
}

}  // namespace smarm::internal
