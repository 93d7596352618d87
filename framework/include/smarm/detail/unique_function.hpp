#pragma once
// A move-only type-erased nullary callable (std::move_only_function is C++23).

#include <memory>
#include <type_traits>
#include <utility>

namespace smarm::detail {

class unique_function {
  public:
    unique_function() = default;
    template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, unique_function>>>
    unique_function(F&& f) : impl_(std::make_unique<model<std::decay_t<F>>>(std::forward<F>(f))) {}

    void operator()() { impl_->call(); }
    explicit operator bool() const noexcept { return impl_ != nullptr; }

  private:
    struct concept_t {
        virtual ~concept_t() = default;
        virtual void call() = 0;
    };
    template <class F>
    struct model final : concept_t {
        explicit model(F&& f) : f_(std::move(f)) {}
        explicit model(const F& f) : f_(f) {}
        void call() override { f_(); }
        F f_;
    };
    std::unique_ptr<concept_t> impl_;
};

}  // namespace smarm::detail
