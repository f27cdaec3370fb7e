// n elements of T that need no allocation up to N: in the object itself (on the stack where it
// is a local), on the heap past that. For per-call scratch on hot paths that must not allocate in
// the common case (a decode step, tests/model/test_step_heap.cpp) yet take any size.
#pragma once

#include <cstddef>
#include <vector>

namespace drama {

template <class T, size_t N>
class StackOrHeap {
 public:
  explicit StackOrHeap(size_t n) : data_(n <= N ? inline_ : (heap_.resize(n), heap_.data())) {}
  StackOrHeap(const StackOrHeap&) = delete;
  StackOrHeap& operator=(const StackOrHeap&) = delete;
  T* data() { return data_; }
  T& operator[](size_t i) { return data_[i]; }

 private:
  T inline_[N];
  std::vector<T> heap_;
  T* data_;  // declared last: set after heap_ exists
};

}  // namespace drama
