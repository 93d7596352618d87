#pragma once
// A growable FIFO ring that allocates nothing until the first push (an idle
// actor's empty inbox costs no heap memory). Not thread-safe.

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace smarm::detail {

template <class T>
class ring {
  public:
    ring() = default;
    ring(const ring&) = delete;
    ring& operator=(const ring&) = delete;
    ring(ring&& o) noexcept
        : buf_(std::exchange(o.buf_, nullptr)),
          cap_(std::exchange(o.cap_, 0)),
          head_(std::exchange(o.head_, 0)),
          size_(std::exchange(o.size_, 0)) {}
    ring& operator=(ring&& o) noexcept {
        if (this != &o) {
            destroy();
            buf_ = std::exchange(o.buf_, nullptr);
            cap_ = std::exchange(o.cap_, 0);
            head_ = std::exchange(o.head_, 0);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    ~ring() { destroy(); }

    bool empty() const noexcept { return size_ == 0; }
    std::size_t size() const noexcept { return size_; }
    T& operator[](std::size_t i) noexcept { return buf_[(head_ + i) & (cap_ - 1)]; }

    void push_back(T&& v) {
        if (size_ == cap_) grow();
        ::new (&buf_[(head_ + size_) & (cap_ - 1)]) T(std::move(v));
        ++size_;
    }
    void push_front(T&& v) {
        if (size_ == cap_) grow();
        head_ = (head_ + cap_ - 1) & (cap_ - 1);
        ::new (&buf_[head_]) T(std::move(v));
        ++size_;
    }
    T pop_front() {
        T& f = buf_[head_];
        T v(std::move(f));
        f.~T();
        head_ = (head_ + 1) & (cap_ - 1);
        --size_;
        return v;
    }
    /// Removes element i (0 = front), keeping the order of the rest.
    T take(std::size_t i) {
        if (i == 0) return pop_front();
        T v(std::move((*this)[i]));
        for (std::size_t k = i; k + 1 < size_; ++k)
            (*this)[k] = std::move((*this)[k + 1]);
        (*this)[size_ - 1].~T();
        --size_;
        return v;
    }

  private:
    void grow() {
        std::size_t ncap = cap_ ? cap_ * 2 : 4;
        T* nb = static_cast<T*>(::operator new (ncap * sizeof(T), std::align_val_t{alignof(T)}));
        for (std::size_t i = 0; i < size_; ++i) {
            T& src = (*this)[i];
            ::new (&nb[i]) T(std::move(src));
            src.~T();
        }
        if (buf_) ::operator delete (buf_, std::align_val_t{alignof(T)});
        buf_ = nb;
        cap_ = ncap;
        head_ = 0;
    }
    void destroy() noexcept {
        for (std::size_t i = 0; i < size_; ++i)
            (*this)[i].~T();
        if (buf_) ::operator delete (buf_, std::align_val_t{alignof(T)});
        buf_ = nullptr;
        cap_ = head_ = size_ = 0;
    }
    T* buf_ = nullptr;
    std::size_t cap_ = 0, head_ = 0, size_ = 0;
};

}  // namespace smarm::detail
