// A decode step allocates nothing on the heap once its sessions stream (issue 12: "no allocation
// happens after load"): this binary replaces the global operator new with one that counts, and
// the steps of 1, 3 and 8 sessions (paired and separate guidance) at 1 and 2 threads must not
// move the count. The backend's own counters (tests/model/test_sessions.cpp) see only device
// allocations; this sees every host allocation of the step, on the workers too.
// GCC pairs its knowledge of malloc/free with the replaced operators below and warns that free()
// releases memory from operator new; here operator new is malloc, so the pair matches.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "format/checkpoint.h"
#include "model/drama3_model.h"
#include "model/prompt.h"

#include "model/model_testing.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Every form of operator new goes through these two (the library's array and nothrow forms call
// the plain ones).
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace drama {
namespace {

SessionSpec spec(const Drama3Config& c, int s) {
  SessionSpec sp;
  const std::string text =
      "heap " + std::to_string(s) + std::string(static_cast<size_t>(s * 7), 'x');
  if (s % 2 == 1) {
    const Voice v = testing::random_voice(c, 3 + s, static_cast<uint64_t>(s), "reference");
    sp.cond = conditional_prompt(c, text, v);
    sp.uncond = unconditional_prompt(c, text);
  } else {
    sp.cond = unconditional_prompt(c, text);
  }
  sp.options.seed = 7 + static_cast<uint64_t>(s);
  sp.options.gamma = s % 2 == 1 ? 1.5f : 1.0f;
  sp.options.cfg = s % 4 == 3 ? CfgMode::Separate : CfgMode::Paired;
  sp.options.max_frames = 1000;
  sp.options.ignore_eos = true;  // every session streams through the measured steps
  return sp;
}

TEST(StepHeap, DecodeStepsAllocateNothing) {
  const auto dir = testing::make_checkpoint("tiny-nvfp4-heap", "--nvfp4");
  for (int threads : {1, 2}) {
    Checkpoint ck(dir);
    auto backend = make_backend({"cpu", threads, 0.0});
    Drama3Model model(ck, *backend, {8, 16});
    for (int sessions : {1, 3, 8}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(sessions) + " sessions");
      std::vector<uint64_t> ids;
      for (int s = 0; s < sessions; ++s) ids.push_back(model.join(spec(ck.config(), s)));
      // Prefill, then a few steps for every buffer to reach its size.
      int64_t streaming = 0;
      for (int step = 0; step < 200 && streaming < sessions; ++step) {
        streaming = 0;
        for (const StepEvent& e : model.step()) streaming += e.finished ? 0 : 1;
      }
      ASSERT_EQ(streaming, sessions);
      for (int step = 0; step < 3; ++step) model.step();
      for (int step = 0; step < 4; ++step) {
        const int64_t before = g_allocations.load();
        const auto& events = model.step();
        const int64_t after = g_allocations.load();
        EXPECT_EQ(after - before, 0) << "step " << step;
        EXPECT_EQ(static_cast<int64_t>(events.size()), sessions);
      }
      for (uint64_t id : ids) model.cancel(id);
      model.step();
      ASSERT_EQ(model.active_sessions(), 0);
    }
  }
}

}  // namespace
}  // namespace drama
