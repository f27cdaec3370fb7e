// `drama bench codec`: Mimi decode (streamed and whole) and encode speed on a random codec at the
// real Mimi geometry (hidden 512, 8 transformer layers, filters 64, ratios [8,6,5,4], 8
// codebooks), built in a temporary directory, or with --weights on a shipped checkpoint's codec
// (verified, as every command loads it). Real-time factor = audio seconds / compute seconds.
// The ceiling measured in the same run is the backend's conv1d rate on a large convolution, with
// the decoder's arithmetic per frame, so the achieved rate can be read against it.
// --streams N,...: N streams decoded in shared passes (MimiDecodeBatch, what `drama serve` does
// with the frames of requests that arrive together), CPU time per stream-frame beside one
// stream's, each stream's samples checked equal to the stream decoded alone.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/bench.h"
#include "cli/weights_options.h"
#include "codec/codec_ops.h"
#include "codec/mimi.h"
#include "codec/mimi_layers.h"
#include "format/random_checkpoint.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct CodecBenchOptions {
  int64_t frames = 50;
  int threads = 1;
  std::string backend = "cpu";
  std::string weights;  // empty: the random codec at the Mimi geometry
  std::string json;
  std::vector<int64_t> streams = {1, 8, 32};
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Process CPU time: on a shared, loaded machine it measures the work done rather than the wait
// for a core (with --threads 1 it is the single thread's time).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Multiply-adds x 2 of one decoded frame, layer by layer (SEANet, transformer, RVQ projection).
double decoder_flops_per_frame(const MimiModel& m) {
  const MimiConfig& c = m.config();
  double flops = 0;
  int64_t t = 2;  // positions per frame after the 2x upsample
  for (const SeanetLayer& l : m.weights().decoder) {
    auto conv = [&](const ConvWeights& w, int64_t len) {
      return 2.0 * len * w.out * (w.in / w.groups) * w.kernel;
    };
    if (l.kind == SeanetLayer::Kind::Conv) flops += conv(l.conv, t);
    if (l.kind == SeanetLayer::Kind::ConvTranspose) {
      flops += 2.0 * t * l.conv.in * (l.conv.out / l.conv.groups) * l.conv.kernel;
      t *= l.conv.stride;
    }
    if (l.kind == SeanetLayer::Kind::Resnet) flops += conv(l.block1, t) + conv(l.block3, t);
  }
  const double d = c.hidden_size, q = c.num_attention_heads * c.head_dim,
               kv = c.num_key_value_heads * c.head_dim, inter = c.intermediate_size;
  flops += 2.0 * 2 * c.num_hidden_layers * (d * q * 2 + d * kv * 2 + d * inter * 2);
  flops += 2.0 * 2 * d * c.vector_quantization_hidden_dimension;
  return flops;
}

// The backend's conv1d rate (CPU time) on a 512 -> 512 channel, kernel 3 convolution over 2048
// steps.
double conv1d_gflops(Backend& b) {
  const int64_t ch = 512, k = 3, len = 2048 + 2, out_len = 2048;
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0.f, 0.05f);
  std::vector<float> x(ch * len), w(ch * ch * k), y(ch * out_len);
  for (auto& v : x) v = n(rng);
  for (auto& v : w) v = n(rng);
  auto bx = b.alloc(x.size() * 4), bw = b.alloc(w.size() * 4), by = b.alloc(y.size() * 4);
  b.upload(bx->data(), x.data(), x.size() * 4);
  b.upload(bw->data(), w.data(), w.size() * 4);
  int reps = 0;
  const double c0 = cpu_seconds();
  do {
    b.conv1d(bx->f32(), ch, len, bw->f32(), nullptr, ch, k, 1, 1, 1, by->f32(), out_len);
    b.synchronize();
    ++reps;
  } while (cpu_seconds() - c0 < 1.0);
  return 2.0 * ch * ch * k * out_len * reps / (cpu_seconds() - c0) / 1e9;
}

int run_codec_bench(const CodecBenchOptions& o) {
  if (o.frames < 1) throw UsageError("--frames must be positive.");
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("drama-bench-codec-" + std::to_string(::getpid()));
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};
  std::optional<ResolvedCheckpoint> checkpoint;  // holds the device lock while the codec runs
  fs::path codec_dir = dir;
  if (o.weights.empty()) {
    fs::create_directories(dir);
    MimiConfig geometry;  // HF defaults: the real Mimi geometry
    geometry.num_quantizers = 8;
    write_random_codec(geometry, 1, dir);
  } else {
    WeightsOptions w;
    w.weights = o.weights;
    w.backend = {o.backend, o.threads};
    checkpoint = resolve_weights(w);
    codec_dir = checkpoint->dir / "codec";
  }
  auto backend = make_backend({o.backend, o.threads});
  MimiModel model(codec_dir, *backend);
  const MimiConfig& geometry = model.config();
  const int64_t k = std::min<int64_t>(8, model.num_quantizers()), spf = model.samples_per_frame();
  std::mt19937_64 rng(42);
  std::vector<int32_t> codes(static_cast<size_t>(o.frames * k));
  for (auto& v : codes) v = static_cast<int32_t>(rng() % model.codebook_size());
  const double audio_s = static_cast<double>(o.frames * spf) / model.sample_rate();

  // Streamed, frame by frame (what the engine does), with the worst frame.
  MimiDecoderStream stream(model);
  std::vector<float> pcm, all;
  double worst = 0;
  double c0 = cpu_seconds();
  auto t0 = Clock::now();
  for (int64_t f = 0; f < o.frames; ++f) {
    const auto tf = Clock::now();
    stream.decode_frame(std::span(codes).subspan(f * k, k), pcm);
    worst = std::max(worst, seconds_since(tf));
    all.insert(all.end(), pcm.begin(), pcm.end());
  }
  const double streamed_s = seconds_since(t0), streamed_cpu = cpu_seconds() - c0;
  c0 = cpu_seconds();
  t0 = Clock::now();
  const std::vector<float> whole = model.decode(codes, o.frames, k);
  const double whole_s = seconds_since(t0), whole_cpu = cpu_seconds() - c0;
  c0 = cpu_seconds();
  t0 = Clock::now();
  model.encode(whole, k);
  const double encode_s = seconds_since(t0), encode_cpu = cpu_seconds() - c0;

  // Where the decode time goes: the decoder transformer alone on the same number of positions.
  CodecOps ops(*backend);
  MimiTransformer transformer(ops, model.config(), model.weights().decoder_transformer);
  DeviceArray rows;
  float* r = rows.ensure(*backend, 2 * model.config().hidden_size);
  std::vector<float> zeros(2 * model.config().hidden_size, 0.01f);
  c0 = cpu_seconds();
  for (int64_t f = 0; f < o.frames; ++f) {
    backend->upload(r, zeros.data(), zeros.size() * 4);
    transformer.forward(r, 2);
  }
  const double transformer_cpu = cpu_seconds() - c0;

  // Streams in shared passes: every stream decodes the same codes, so each must give `all`.
  nlohmann::json passes = nlohmann::json::array();
  double one_stream_ms = 0;
  for (int64_t n : o.streams) {
    if (n < 1) throw UsageError("--streams takes positive counts.");
    MimiDecodeBatch batch(model);
    std::vector<std::unique_ptr<MimiDecoderStream>> owned;
    std::vector<MimiDecoderStream*> streams;
    std::vector<std::vector<float>> out(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    std::vector<std::vector<float>*> outs;
    for (int64_t i = 0; i < n; ++i) {
      owned.push_back(std::make_unique<MimiDecoderStream>(model));
      streams.push_back(owned.back().get());
      outs.push_back(&out[static_cast<size_t>(i)]);
    }
    std::vector<std::span<const int32_t>> frame(static_cast<size_t>(n));
    double cpu = 0;
    for (int64_t f = 0; f < o.frames; ++f) {
      for (auto& c : frame) c = std::span(codes).subspan(f * k, k);
      const double cf = cpu_seconds();
      batch.decode(streams, frame, outs);
      cpu += cpu_seconds() - cf;
      for (int64_t i = 0; i < n; ++i)
        got[static_cast<size_t>(i)].insert(got[static_cast<size_t>(i)].end(),
                                           out[static_cast<size_t>(i)].begin(),
                                           out[static_cast<size_t>(i)].end());
    }
    bool equal = true;
    for (const auto& g : got) equal = equal && g == all;
    const double ms = 1e3 * cpu / static_cast<double>(o.frames * n);
    if (n == 1) one_stream_ms = ms;
    passes.push_back({{"streams", n},
                      {"cpu_ms_per_stream_frame", ms},
                      {"real_time_streams_cpu", 1e3 / model.frame_rate() / ms},
                      {"speedup_vs_one_stream", one_stream_ms > 0 ? one_stream_ms / ms : 0.0},
                      {"each_equals_alone", equal}});
  }

  const double flops = decoder_flops_per_frame(model);
  nlohmann::json j;
  j["bench"] = "codec";
  j["backend"] = backend->name();
  j["threads"] = o.threads;
  j["geometry"] = {{"hidden_size", geometry.hidden_size},
                   {"num_hidden_layers", geometry.num_hidden_layers},
                   {"num_filters", geometry.num_filters},
                   {"upsampling_ratios", geometry.upsampling_ratios},
                   {"num_codebooks", k},
                   {"frame_rate", model.frame_rate()},
                   {"weights", o.weights.empty() ? "random (write_random_codec seed 1)"
                                                 : checkpoint->provenance}};
  j["frames"] = o.frames;
  j["audio_seconds"] = audio_s;
  j["streamed"] = {{"seconds", streamed_s},
                   {"real_time_factor", audio_s / streamed_s},
                   {"cpu_seconds", streamed_cpu},
                   {"real_time_factor_cpu", audio_s / streamed_cpu},
                   {"ms_per_frame", 1e3 * streamed_s / o.frames},
                   {"worst_frame_ms", 1e3 * worst}};
  j["whole"] = {{"seconds", whole_s},
                {"real_time_factor", audio_s / whole_s},
                {"cpu_seconds", whole_cpu},
                {"real_time_factor_cpu", audio_s / whole_cpu}};
  j["encode"] = {{"seconds", encode_s},
                 {"real_time_factor", audio_s / encode_s},
                 {"cpu_seconds", encode_cpu},
                 {"real_time_factor_cpu", audio_s / encode_cpu}};
  // CPU milliseconds per frame: the decoder transformer alone, and the rest (SEANet decoder,
  // RVQ, upsample, state copies).
  j["breakdown_cpu_ms_per_frame"] = {{"decoder_transformer", 1e3 * transformer_cpu / o.frames},
                                     {"rest", 1e3 * (streamed_cpu - transformer_cpu) / o.frames}};
  j["ceiling"] = {{"conv1d_gflops", conv1d_gflops(*backend)},
                  {"decoder_gflop_per_frame", flops / 1e9},
                  {"achieved_decoder_gflops_cpu", flops * o.frames / streamed_cpu / 1e9}};
  j["machine_load_note"] =
      "wall-clock figures include waiting for a core on a shared machine; *_cpu figures do not";
  j["streamed_equals_whole"] = (all == whole);
  j["shared_passes"] = passes;
  const std::string text = j.dump(2);
  std::printf("%s\n", text.c_str());
  if (!o.json.empty()) write_text_file_atomic(o.json, text + "\n");
  return 0;
}

}  // namespace

void register_bench_codec(CLI::App& bench, std::function<int()>& run) {
  auto o = std::make_shared<CodecBenchOptions>();
  auto* sub = bench.add_subcommand("codec", "Mimi decode/encode real-time factor (random codec)");
  sub->add_option("--frames", o->frames, "frames to decode (12.5 per second)");
  sub->add_option("--threads", o->threads, "CPU threads (default 1)");
  sub->add_option("--backend", o->backend, "cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_option("--weights", o->weights,
                  "a shipped checkpoint's codec (e.g. drama-mini), verified; default: a random "
                  "codec at the Mimi geometry");
  sub->add_option("--streams", o->streams,
                  "stream counts decoded in shared passes (default 1,8,32; 1 first gives the "
                  "speedup)")
      ->delimiter(',');
  sub->add_option("--json", o->json, "also write the JSON here");
  sub->callback([&run, o] { run = [o] { return run_codec_bench(*o); }; });
}

}  // namespace drama::cli
