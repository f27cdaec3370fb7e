// Sessions and lanes (docs/model.md): any mix of sessions joining, pausing and leaving at
// different frames gives each session exactly the codes it gets alone, for 1, 2 and 4 threads;
// a decode step makes exactly one device-to-host read and no allocation; no step carries more
// prompt rows than the prefill chunk. Checkpoint: configs/tiny.json (NVFP4), seed 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>

#include "format/checkpoint.h"
#include "model/drama3_model.h"
#include "model/prompt.h"
#include "util/error.h"

#include "model/model_testing.h"
#include "model/recording_backend.h"

namespace drama {
namespace {

using testing::make_checkpoint;

struct Loaded {
  Loaded(const std::filesystem::path& dir, int threads, ModelCapacity cap)
      : Loaded(dir, make_backend({"cpu", threads, 0.0}), cap) {}
  Loaded(const std::filesystem::path& dir, std::unique_ptr<Backend> b, ModelCapacity cap)
      : ckpt(dir), backend(std::move(b)), model(ckpt, *backend, cap) {}
  Checkpoint ckpt;
  std::unique_ptr<Backend> backend;
  Drama3Model model;
};

const std::filesystem::path& tiny_dir() {
  static const auto dir = make_checkpoint("tiny-nvfp4", "--nvfp4");
  return dir;
}

// A varied request: voice or none, gamma 1 / 1.5 / 2, paired or separate, several sampling
// settings, prompt lengths from a few bytes to a long reference, 1 to 14 frames.
struct Request {
  SessionSpec spec;
  int64_t cancel_after = -1;  // the caller stops after this many frames (-1: never)
};

Request make_request(const Drama3Config& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Request r;
  const std::string text = "session " + std::to_string(seed) + std::string(rng() % 40, 'x');
  const bool voiced = rng() % 3 != 0;
  const float gammas[] = {1.0f, 1.5f, 2.0f};
  GenerationOptions& o = r.spec.options;
  o.seed = 100 + seed;
  o.gamma = gammas[rng() % 3];
  o.cfg = rng() % 2 ? CfgMode::Paired : CfgMode::Separate;
  o.max_frames = 1 + static_cast<int64_t>(rng() % 14);
  const SamplingParams sp[] = {
      {0.9f, 50, 1.0f}, {0.0f, 50, 1.0f}, {1.2f, 0, 0.9f}, {0.7f, 5, 1.0f}};
  o.sampling = sp[rng() % 4];
  if (voiced) {
    const Voice v = testing::random_voice(c, 2 + static_cast<int64_t>(rng() % 30), seed,
                                          "reference " + std::to_string(seed));
    r.spec.cond = conditional_prompt(c, text, v);
    if (o.gamma != 1.0f) r.spec.uncond = unconditional_prompt(c, text);
  } else {
    r.spec.cond = unconditional_prompt(c, text);
  }
  if (rng() % 5 == 0) r.cancel_after = static_cast<int64_t>(rng() % 4);
  return r;
}

struct Outcome {
  std::vector<int32_t> codes;
  StopReason stop = StopReason::MaxFrames;
  bool operator==(const Outcome&) const = default;
};

// Each request alone, through generate() on a one-lane model.
Outcome alone(Drama3Model& m, const Request& r) {
  Outcome out;
  int64_t frames = 0;
  const GenerationResult g =
      m.generate(r.spec.cond, r.spec.uncond ? &*r.spec.uncond : nullptr, r.spec.options,
                 [&](int64_t, std::span<const int32_t>) { return ++frames != r.cancel_after; });
  out.codes = g.codes;
  out.stop = g.stop;
  return out;
}

// All requests on a `lanes`-lane model under a random schedule: joins at random steps while a
// lane is free, random holds (a slow consumer), cancellation after `cancel_after` frames.
std::vector<Outcome> scheduled(Drama3Model& m, const std::vector<Request>& reqs, uint64_t seed,
                               int64_t& batched_steps) {
  std::mt19937_64 rng(seed);
  std::vector<Outcome> out(reqs.size());
  std::map<uint64_t, size_t> of;  // session -> request
  std::map<uint64_t, int64_t> frames;
  size_t next = 0;
  size_t done = 0;
  for (int guard = 0; done < reqs.size(); ++guard) {
    if (guard > 10000) throw std::runtime_error("schedule did not finish");
    while (next < reqs.size() && m.free_lanes() > 0 && rng() % 3 != 0) {
      of[m.join(reqs[next].spec)] = next;
      ++next;
    }
    for (const auto& [session, i] : of) m.hold(session, rng() % 4 == 0);
    std::vector<StepEvent> events = m.step();
    int64_t made = 0;
    for (const StepEvent& e : events) made += !e.finished;
    batched_steps += made >= 2;
    for (StepEvent& e : events) {
      const size_t i = of.at(e.session);
      if (e.finished) {
        EXPECT_TRUE(e.error.empty()) << e.error;
        if (out[i].stop != StopReason::Cancelled || reqs[i].cancel_after < 0) out[i].stop = e.stop;
        of.erase(e.session);
        ++done;
        continue;
      }
      out[i].codes.insert(out[i].codes.end(), e.codes.begin(), e.codes.end());
      if (++frames[e.session] == reqs[i].cancel_after) {
        out[i].stop = StopReason::Cancelled;
        m.cancel(e.session);
      }
    }
  }
  return out;
}

TEST(Sessions, AnyScheduleGivesEachSessionItsCodesAlone) {
  const auto& dir = tiny_dir();
  Checkpoint ck(dir);
  const Drama3Config& c = ck.config();
  std::vector<Request> reqs;
  for (uint64_t s = 0; s < 12; ++s) reqs.push_back(make_request(c, s));
  std::vector<Outcome> want;
  {
    Loaded one(dir, 1, {1, 128});
    for (const Request& r : reqs) want.push_back(alone(one.model, r));
  }
  int64_t frames = 0;
  for (const Outcome& o : want) frames += static_cast<int64_t>(o.codes.size());
  ASSERT_GT(frames, 0);
  int schedules = 0;
  for (int threads : {1, 2, 4}) {
    // A small prefill chunk, so long prompts take several steps beside streaming sessions.
    Loaded many(dir, threads, {4, 7});
    for (uint64_t seed = 0; seed < (threads == 1 ? 6u : 2u); ++seed) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " schedule " + std::to_string(seed));
      int64_t batched = 0;
      const std::vector<Outcome> got = scheduled(many.model, reqs, seed, batched);
      EXPECT_GT(batched, 0);  // steps that made frames of two sessions or more
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(got[i].codes, want[i].codes) << "request " << i;
        EXPECT_EQ(got[i].stop, want[i].stop) << "request " << i;
      }
      EXPECT_LE(many.model.counters().max_prefill_rows, 7);
      ++schedules;
    }
    EXPECT_EQ(many.model.active_sessions(), 0);
  }
  EXPECT_EQ(schedules, 10);
}

// Decode steps as captured work (a CUDA graph on the GPU): the recording backend replays each
// step shape's recorded calls with the arguments they had when recorded; the codes stay each
// session's codes alone, so nothing a step passes by value depends on more than its key.
TEST(Sessions, ReplayedDecodeStepsGiveEachSessionItsCodesAlone) {
  const auto& dir = tiny_dir();
  Checkpoint ck(dir);
  const Drama3Config& c = ck.config();
  std::vector<Request> reqs;
  for (uint64_t s = 0; s < 12; ++s) {
    reqs.push_back(make_request(c, s));
    reqs.back().spec.options.max_frames = 24 + static_cast<int64_t>(s % 5);  // shapes recur
  }
  std::vector<Outcome> want;
  {
    Loaded one(dir, 1, {1, 128});
    for (const Request& r : reqs) want.push_back(alone(one.model, r));
  }
  for (int threads : {1, 2}) {
    auto rec = std::make_unique<testing::RecordingBackend>(make_backend({"cpu", threads, 0.0}));
    testing::RecordingBackend* recorder = rec.get();
    Loaded many(dir, std::move(rec), {4, 7});
    for (uint64_t seed = 0; seed < 3; ++seed) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " schedule " + std::to_string(seed));
      int64_t batched = 0;
      const std::vector<Outcome> got = scheduled(many.model, reqs, seed, batched);
      for (size_t i = 0; i < reqs.size(); ++i) {
        EXPECT_EQ(got[i].codes, want[i].codes) << "request " << i;
        EXPECT_EQ(got[i].stop, want[i].stop) << "request " << i;
      }
    }
    // A replay counts the linear traffic its key's first run counted: the same schedule on the
    // plain backend makes the same products of the same bytes. (The recording backend, as CUDA,
    // counts no expert bytes.)
    if (threads == 1) {
      Loaded plain(dir, 1, {4, 7});
      Loaded recorded(
          dir, std::make_unique<testing::RecordingBackend>(make_backend({"cpu", 1, 0.0})), {4, 7});
      int64_t unused = 0;
      scheduled(plain.model, reqs, 0, unused);
      scheduled(recorded.model, reqs, 0, unused);
      EXPECT_GT(recorded.model.counters().replayed_steps, 0);
      EXPECT_EQ(recorded.model.workspace().traffic.bytes, plain.model.workspace().traffic.bytes);
      EXPECT_EQ(recorded.model.workspace().traffic.calls, plain.model.workspace().traffic.calls);
    }
    EXPECT_GE(recorder->recordings(), 4);
    EXPECT_GE(recorder->replays(), 50);
    EXPECT_EQ(many.model.counters().replayed_steps, recorder->replays());
    std::cout << "threads " << threads << ": " << recorder->recordings()
              << " step shapes recorded, " << recorder->replays() << " of "
              << many.model.counters().steps << " steps replayed\n";
  }
}

// Inside captured work an upload, a download or an allocation is an internal error on every
// backend (a graph would replay it with the data of its capture).
TEST(Sessions, CapturedWorkRefusesTransfers) {
  auto be = make_backend({"cpu", 1, 0.0});
  auto buf = be->alloc(16);
  float host[4] = {1, 2, 3, 4};
  EXPECT_THROW(be->run_captured("x", [&] { be->upload(buf->data(), host, sizeof host); }), Error);
  EXPECT_THROW(be->run_captured("x", [&] { be->download(host, buf->data(), sizeof host); }), Error);
  EXPECT_THROW(be->run_captured("x", [&] { be->alloc(16); }), Error);
  EXPECT_THROW(be->run_captured("x", [&] { be->run_captured("y", [] {}); }), Error);
  be->upload(buf->data(), host, sizeof host);  // outside: allowed again
  bool ran = false;
  EXPECT_FALSE(be->run_captured("x", [&] { ran = true; }));  // the CPU runs it, never replays
  EXPECT_TRUE(ran);
}

TEST(Sessions, ADecodeStepReadsOnceAndAllocatesNothing) {
  const auto& dir = tiny_dir();
  Loaded l(dir, 2, {8, 16});
  const Drama3Config& c = l.ckpt.config();
  const TransferCounters at_load = l.backend->transfers();
  for (int sessions : {1, 3, 8}) {
    SCOPED_TRACE(std::to_string(sessions) + " sessions");
    std::vector<uint64_t> ids;
    for (int s = 0; s < sessions; ++s) {
      Request r = make_request(c, 50 + s);
      r.spec.options.max_frames = 1000;
      r.spec.options.sampling = {0.9f, 0, 1.0f};
      ids.push_back(l.model.join(r.spec));
    }
    // Prefill (chunks of 16 rows) until every session streams.
    int64_t made = 0;
    for (int step = 0; step < 200 && made < sessions; ++step)
      for (const StepEvent& e : l.model.step()) made += e.finished ? 0 : e.frame == 0;
    ASSERT_EQ(made, sessions);
    for (int step = 0; step < 3; ++step) {
      const int64_t active = l.model.active_sessions();
      ASSERT_GT(active, 0);
      const TransferCounters before = l.backend->transfers();
      const std::vector<StepEvent> ev = l.model.step();
      const TransferCounters after = l.backend->transfers();
      EXPECT_EQ(after.d2h_calls - before.d2h_calls, 1u);
      EXPECT_EQ(after.d2h_bytes - before.d2h_bytes,
                static_cast<uint64_t>(active * (c.audio.num_codebooks + 1) * 4));
      EXPECT_EQ(after.h2d_calls - before.h2d_calls, 1u);  // the step's plan
      EXPECT_EQ(after.allocs, before.allocs);
      EXPECT_GE(static_cast<int64_t>(ev.size()), active);  // a frame (or an end) each
    }
    for (uint64_t id : ids) l.model.cancel(id);
    l.model.step();
    EXPECT_EQ(l.model.active_sessions(), 0);
  }
  EXPECT_EQ(l.backend->transfers().allocs, at_load.allocs);  // nothing since load
  EXPECT_LE(l.model.counters().max_prefill_rows, 16);
  EXPECT_GT(l.model.counters().prefill_rows, 0);
}

// ignore_eos (benchmarks): a session that ends at end of speech alone runs on to max_frames with
// the same frames first, its end-of-speech frame reported as a frame; without it nothing changes.
TEST(Sessions, IgnoreEosRunsOnWithTheSameFirstFrames) {
  const auto& dir = tiny_dir();
  Loaded l(dir, 1, {1, 128});
  const Drama3Config& c = l.ckpt.config();
  const int64_t K = c.audio.num_codebooks;
  int tried = 0;
  for (uint64_t s = 0; s < 200; ++s) {
    Request r = make_request(c, s);
    r.cancel_after = -1;
    r.spec.options.max_frames = 40;
    const Outcome stopped = alone(l.model, r);
    if (stopped.stop != StopReason::Eos) continue;
    ++tried;
    r.spec.options.ignore_eos = true;
    const Outcome on = alone(l.model, r);
    EXPECT_EQ(on.stop, StopReason::MaxFrames) << "request " << s;
    ASSERT_EQ(static_cast<int64_t>(on.codes.size()), 40 * K) << "request " << s;
    const size_t eos_at = stopped.codes.size();
    EXPECT_TRUE(std::equal(stopped.codes.begin(), stopped.codes.end(), on.codes.begin()))
        << "request " << s;
    EXPECT_EQ(on.codes[eos_at], c.audio.eos_code) << "request " << s;
    if (tried == 3) break;
  }
  EXPECT_EQ(tried, 3);  // three requests that end at end of speech within 40 frames
}

// ModelCapacity::max_positions: a shorter context gives the same frames as the full one until
// its position limit, stops there (PositionLimit), and refuses a prompt longer than itself; a
// context over max_position_embeddings is refused at load.
TEST(Sessions, AShorterContextStopsAtItsLimitWithTheSameFrames) {
  const auto& dir = tiny_dir();
  Loaded full(dir, 1, {1, 128});
  const Drama3Config& c = full.ckpt.config();
  const int64_t K = c.audio.num_codebooks;
  Request r = make_request(c, 3);
  r.cancel_after = -1;
  r.spec.uncond.reset();
  r.spec.cond = unconditional_prompt(c, "a context of its own");
  r.spec.options.max_frames = 30;
  r.spec.options.ignore_eos = true;
  const int64_t rows = r.spec.cond.rows, frames = 6;
  ModelCapacity cap{1, 128};
  cap.max_positions = rows + frames - 1;  // room for exactly `frames` frames
  Loaded shorter(dir, 1, cap);
  EXPECT_EQ(shorter.model.max_positions(), cap.max_positions);
  const Outcome a = alone(full.model, r), b = alone(shorter.model, r);
  EXPECT_EQ(a.stop, StopReason::MaxFrames);
  EXPECT_EQ(b.stop, StopReason::PositionLimit);
  ASSERT_EQ(static_cast<int64_t>(b.codes.size()), frames * K);
  EXPECT_TRUE(std::equal(b.codes.begin(), b.codes.end(), a.codes.begin()));

  ModelCapacity tight{1, 128};
  tight.max_positions = rows - 1;
  Loaded small(dir, 1, tight);
  try {
    small.model.join(r.spec);
    FAIL() << "a prompt longer than the context joined";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
  ModelCapacity over{1, 128};
  over.max_positions = c.backbone.max_position_embeddings + 1;
  EXPECT_THROW(Loaded(dir, 1, over), Error);
}

TEST(Sessions, RefusalsAndAFullModel) {
  const auto& dir = tiny_dir();
  Loaded l(dir, 1, {2, 32});
  const Drama3Config& c = l.ckpt.config();
  Request r = make_request(c, 7);
  const uint64_t a = l.model.join(r.spec), b = l.model.join(r.spec);
  EXPECT_NE(a, b);
  EXPECT_EQ(l.model.free_lanes(), 0);
  try {
    l.model.join(r.spec);
    FAIL() << "a third session joined a two-lane model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lanes"), std::string::npos) << e.what();
  }
  SessionSpec empty;
  EXPECT_THROW(l.model.join(empty), Error);
  l.model.cancel(a);
  l.model.cancel(b);
  const std::vector<StepEvent> ev = l.model.step();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_TRUE(ev[0].finished && ev[1].finished);
  EXPECT_EQ(ev[0].stop, StopReason::Cancelled);
  EXPECT_EQ(l.model.free_lanes(), 2);
}

}  // namespace
}  // namespace drama
