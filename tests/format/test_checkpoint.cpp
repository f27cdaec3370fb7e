// The validated checkpoint loader and the random checkpoint writer (spec sections 2-5): both
// router layouts, NVFP4 and BF16 experts, pruning byte-equality, determinism, the codec's Hugging
// Face layout, and one crafted directory per refusal.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "format/checkpoint.h"
#include "format/manifest.h"
#include "format/random_checkpoint.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Names and shapes of Hugging Face MimiModel for a small config (spec hf-layouts.txt).
constexpr const char* kHfMimiLayout = R"(
encoder.layers.0.conv.weight 8x1x7
encoder.layers.0.conv.bias 8
encoder.layers.1.block.1.conv.weight 4x8x3
encoder.layers.1.block.1.conv.bias 4
encoder.layers.1.block.3.conv.weight 8x4x1
encoder.layers.1.block.3.conv.bias 8
encoder.layers.3.conv.weight 16x8x8
encoder.layers.3.conv.bias 16
encoder.layers.4.block.1.conv.weight 8x16x3
encoder.layers.4.block.1.conv.bias 8
encoder.layers.4.block.3.conv.weight 16x8x1
encoder.layers.4.block.3.conv.bias 16
encoder.layers.6.conv.weight 32x16x10
encoder.layers.6.conv.bias 32
encoder.layers.7.block.1.conv.weight 16x32x3
encoder.layers.7.block.1.conv.bias 16
encoder.layers.7.block.3.conv.weight 32x16x1
encoder.layers.7.block.3.conv.bias 32
encoder.layers.9.conv.weight 64x32x12
encoder.layers.9.conv.bias 64
encoder.layers.10.block.1.conv.weight 32x64x3
encoder.layers.10.block.1.conv.bias 32
encoder.layers.10.block.3.conv.weight 64x32x1
encoder.layers.10.block.3.conv.bias 64
encoder.layers.12.conv.weight 128x64x16
encoder.layers.12.conv.bias 128
encoder.layers.14.conv.weight 64x128x3
encoder.layers.14.conv.bias 64
encoder_transformer.layers.0.self_attn.q_proj.weight 64x64
encoder_transformer.layers.0.self_attn.k_proj.weight 64x64
encoder_transformer.layers.0.self_attn.v_proj.weight 64x64
encoder_transformer.layers.0.self_attn.o_proj.weight 64x64
encoder_transformer.layers.0.mlp.fc1.weight 128x64
encoder_transformer.layers.0.mlp.fc2.weight 64x128
encoder_transformer.layers.0.input_layernorm.weight 64
encoder_transformer.layers.0.input_layernorm.bias 64
encoder_transformer.layers.0.post_attention_layernorm.weight 64
encoder_transformer.layers.0.post_attention_layernorm.bias 64
encoder_transformer.layers.0.self_attn_layer_scale.scale 64
encoder_transformer.layers.0.mlp_layer_scale.scale 64
encoder_transformer.layers.1.self_attn.q_proj.weight 64x64
encoder_transformer.layers.1.self_attn.k_proj.weight 64x64
encoder_transformer.layers.1.self_attn.v_proj.weight 64x64
encoder_transformer.layers.1.self_attn.o_proj.weight 64x64
encoder_transformer.layers.1.mlp.fc1.weight 128x64
encoder_transformer.layers.1.mlp.fc2.weight 64x128
encoder_transformer.layers.1.input_layernorm.weight 64
encoder_transformer.layers.1.input_layernorm.bias 64
encoder_transformer.layers.1.post_attention_layernorm.weight 64
encoder_transformer.layers.1.post_attention_layernorm.bias 64
encoder_transformer.layers.1.self_attn_layer_scale.scale 64
encoder_transformer.layers.1.mlp_layer_scale.scale 64
downsample.conv.weight 64x64x4
upsample.conv.weight 64x1x4
decoder_transformer.layers.0.self_attn.q_proj.weight 64x64
decoder_transformer.layers.0.self_attn.k_proj.weight 64x64
decoder_transformer.layers.0.self_attn.v_proj.weight 64x64
decoder_transformer.layers.0.self_attn.o_proj.weight 64x64
decoder_transformer.layers.0.mlp.fc1.weight 128x64
decoder_transformer.layers.0.mlp.fc2.weight 64x128
decoder_transformer.layers.0.input_layernorm.weight 64
decoder_transformer.layers.0.input_layernorm.bias 64
decoder_transformer.layers.0.post_attention_layernorm.weight 64
decoder_transformer.layers.0.post_attention_layernorm.bias 64
decoder_transformer.layers.0.self_attn_layer_scale.scale 64
decoder_transformer.layers.0.mlp_layer_scale.scale 64
decoder_transformer.layers.1.self_attn.q_proj.weight 64x64
decoder_transformer.layers.1.self_attn.k_proj.weight 64x64
decoder_transformer.layers.1.self_attn.v_proj.weight 64x64
decoder_transformer.layers.1.self_attn.o_proj.weight 64x64
decoder_transformer.layers.1.mlp.fc1.weight 128x64
decoder_transformer.layers.1.mlp.fc2.weight 64x128
decoder_transformer.layers.1.input_layernorm.weight 64
decoder_transformer.layers.1.input_layernorm.bias 64
decoder_transformer.layers.1.post_attention_layernorm.weight 64
decoder_transformer.layers.1.post_attention_layernorm.bias 64
decoder_transformer.layers.1.self_attn_layer_scale.scale 64
decoder_transformer.layers.1.mlp_layer_scale.scale 64
decoder.layers.0.conv.weight 128x64x7
decoder.layers.0.conv.bias 128
decoder.layers.2.conv.weight 128x64x16
decoder.layers.2.conv.bias 64
decoder.layers.3.block.1.conv.weight 32x64x3
decoder.layers.3.block.1.conv.bias 32
decoder.layers.3.block.3.conv.weight 64x32x1
decoder.layers.3.block.3.conv.bias 64
decoder.layers.5.conv.weight 64x32x12
decoder.layers.5.conv.bias 32
decoder.layers.6.block.1.conv.weight 16x32x3
decoder.layers.6.block.1.conv.bias 16
decoder.layers.6.block.3.conv.weight 32x16x1
decoder.layers.6.block.3.conv.bias 32
decoder.layers.8.conv.weight 32x16x10
decoder.layers.8.conv.bias 16
decoder.layers.9.block.1.conv.weight 8x16x3
decoder.layers.9.block.1.conv.bias 8
decoder.layers.9.block.3.conv.weight 16x8x1
decoder.layers.9.block.3.conv.bias 16
decoder.layers.11.conv.weight 16x8x8
decoder.layers.11.conv.bias 8
decoder.layers.12.block.1.conv.weight 4x8x3
decoder.layers.12.block.1.conv.bias 4
decoder.layers.12.block.3.conv.weight 8x4x1
decoder.layers.12.block.3.conv.bias 8
decoder.layers.14.conv.weight 1x8x3
decoder.layers.14.conv.bias 1
quantizer.semantic_residual_vector_quantizer.layers.0.codebook.initialized 1
quantizer.semantic_residual_vector_quantizer.layers.0.codebook.cluster_usage 64
quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum 64x32
quantizer.semantic_residual_vector_quantizer.input_proj.weight 32x64x1
quantizer.semantic_residual_vector_quantizer.output_proj.weight 64x32x1
quantizer.acoustic_residual_vector_quantizer.layers.0.codebook.initialized 1
quantizer.acoustic_residual_vector_quantizer.layers.0.codebook.cluster_usage 64
quantizer.acoustic_residual_vector_quantizer.layers.0.codebook.embed_sum 64x32
quantizer.acoustic_residual_vector_quantizer.layers.1.codebook.initialized 1
quantizer.acoustic_residual_vector_quantizer.layers.1.codebook.cluster_usage 64
quantizer.acoustic_residual_vector_quantizer.layers.1.codebook.embed_sum 64x32
quantizer.acoustic_residual_vector_quantizer.layers.2.codebook.initialized 1
quantizer.acoustic_residual_vector_quantizer.layers.2.codebook.cluster_usage 64
quantizer.acoustic_residual_vector_quantizer.layers.2.codebook.embed_sum 64x32
quantizer.acoustic_residual_vector_quantizer.layers.3.codebook.initialized 1
quantizer.acoustic_residual_vector_quantizer.layers.3.codebook.cluster_usage 64
quantizer.acoustic_residual_vector_quantizer.layers.3.codebook.embed_sum 64x32
quantizer.acoustic_residual_vector_quantizer.layers.4.codebook.initialized 1
quantizer.acoustic_residual_vector_quantizer.layers.4.codebook.cluster_usage 64
quantizer.acoustic_residual_vector_quantizer.layers.4.codebook.embed_sum 64x32
quantizer.acoustic_residual_vector_quantizer.layers.5.codebook.initialized 1
quantizer.acoustic_residual_vector_quantizer.layers.5.codebook.cluster_usage 64
quantizer.acoustic_residual_vector_quantizer.layers.5.codebook.embed_sum 64x32
quantizer.acoustic_residual_vector_quantizer.layers.6.codebook.initialized 1
quantizer.acoustic_residual_vector_quantizer.layers.6.codebook.cluster_usage 64
quantizer.acoustic_residual_vector_quantizer.layers.6.codebook.embed_sum 64x32
quantizer.acoustic_residual_vector_quantizer.input_proj.weight 32x64x1
quantizer.acoustic_residual_vector_quantizer.output_proj.weight 64x32x1
)";

constexpr uint64_t kSeed = 1;

fs::path source_dir() {
  const char* s = std::getenv("DRAMA_SOURCE_DIR");
  return s ? fs::path(s) : fs::path(__FILE__).parent_path().parent_path().parent_path();
}

json config(const char* name) {
  return json::parse(read_text_file(source_dir() / "configs" / name));
}

class CheckpointTest : public ::testing::Test {
 protected:
  static fs::path root() {
    static const fs::path dir = [] {
      const char* t = std::getenv("DRAMA_TEST_TMP");
      fs::path base = t ? fs::path(t) : fs::temp_directory_path();
      fs::path d = base / ("checkpoint-test-" + std::to_string(::getpid()));
      fs::remove_all(d);
      fs::create_directories(d);
      return d;
    }();
    return dir;
  }
  static void TearDownTestSuite() { fs::remove_all(root()); }

  // Generates (once per name) a checkpoint of configs/tiny.json.
  static fs::path make(const std::string& name, bool nvfp4, std::optional<int64_t> prune = {},
                       const std::string& layout = "full", uint64_t seed = kSeed,
                       const char* cfg = "tiny.json") {
    const fs::path dir = root() / name;
    if (fs::exists(dir)) return dir;
    std::printf("generating %s (seed %llu)\n", name.c_str(), static_cast<unsigned long long>(seed));
    RandomCheckpointOptions o;
    o.config = config(cfg);
    o.seed = seed;
    o.nvfp4 = nvfp4;
    o.prune_to = prune;
    o.router_layout = layout;
    write_random_checkpoint(o, dir);
    return dir;
  }
};

struct Stored {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using TensorMap = std::map<std::string, Stored>;

TensorMap read_all(const fs::path& dir) {
  TensorSet set(dir);
  TensorMap m;
  for (const auto& name : set.names()) {
    const TensorView v = set.view(name);
    m[name] = {v.info->dtype, v.info->shape, std::vector<uint8_t>(v.data, v.data + v.bytes())};
  }
  return m;
}

// Copies a checkpoint's config files into `dst` and writes `tensors` as one model.safetensors.
fs::path craft(const fs::path& src, const fs::path& dst, const TensorMap& tensors) {
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const char* f : {"config.json", "hf_quant_config.json"})
    if (fs::exists(src / f)) fs::copy_file(src / f, dst / f);
  SafetensorsWriter w;
  for (const auto& [name, t] : tensors) w.add(name, t.dtype, t.shape, t.bytes);
  w.write(dst / "model.safetensors");
  return dst;
}

// Loads `dir` and expects a refusal whose message holds every string in `want`.
void expect_refused(const fs::path& dir, const std::vector<std::string>& want) {
  try {
    Checkpoint c(dir);
    ADD_FAILURE() << "loaded " << dir;
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("refused as expected: %s\n", msg.c_str());
    for (const auto& w : want)
      EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
  }
}

TEST_F(CheckpointTest, TinyBf16LoadsWithSortedShards) {
  const fs::path dir = make("bf16", false);
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model-00002-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "hf_quant_config.json"));
  const Checkpoint c(dir);
  const ModelWeights& w = c.weights();
  ASSERT_EQ(w.backbone.size(), 2u);
  EXPECT_TRUE(w.backbone[0].dense);
  EXPECT_NE(w.backbone[0].mlp.down.data, nullptr);
  const MoeWeights& moe = w.backbone[1].moe;
  ASSERT_EQ(moe.experts.size(), 8u);
  EXPECT_EQ(moe.router.out, 8);
  for (int32_t s = 0; s < 8; ++s) {
    EXPECT_EQ(moe.original_id[s], s);
    EXPECT_EQ(moe.logit_column[s], s);
    EXPECT_EQ(moe.experts[s].gate.format, WeightFormat::BF16);
  }
  EXPECT_FALSE(moe.shared_expert.has_value());
  ASSERT_EQ(w.tower_heads.size(), 3u);
  EXPECT_EQ(static_cast<const uint16_t*>(w.tower_heads[1].data),
            static_cast<const uint16_t*>(w.tower_heads[0].data) + 64 * 32);
  EXPECT_EQ(w.codebook0_head.out, 65);
  // The manifest lists every file and they verify.
  const Manifest m = load_manifest(dir / "manifest.json");
  EXPECT_EQ(m.files.size(), 6u);
  EXPECT_TRUE(verify_directory(dir, m).ok());
}

TEST_F(CheckpointTest, TinyNvfp4LoadsAndSharesScale2ForOddExperts) {
  const fs::path dir = make("nvfp4", true);
  const Checkpoint c(dir);
  ASSERT_TRUE(c.quant().has_value());
  const MoeWeights& moe = c.weights().backbone[1].moe;
  bool even_differs = false;
  for (int s = 0; s < 8; ++s) {
    const MlpWeights& e = moe.experts[s];
    EXPECT_EQ(e.gate.format, WeightFormat::NVFP4);
    EXPECT_EQ(e.down.format, WeightFormat::NVFP4);
    EXPECT_NE(e.gate.scales, nullptr);
    EXPECT_GT(e.gate.scale2, 0.0f);
    if (s % 2 == 1) {
      EXPECT_EQ(e.gate.scale2, e.up.scale2) << "expert " << s;
    }
    if (s % 2 == 0 && e.gate.scale2 != e.up.scale2) even_differs = true;
  }
  EXPECT_TRUE(even_differs);
  // Dense weights stay BF16 in an NVFP4 checkpoint.
  EXPECT_EQ(c.weights().backbone[1].attn.q.format, WeightFormat::BF16);
}

TEST_F(CheckpointTest, PrunedFullAndSlicedRoutersLoad) {
  const fs::path full_dir = make("pruned-full", true, 4, "full");
  const fs::path sliced_dir = make("pruned-sliced", true, 4, "sliced");
  const TensorMap unpruned = read_all(make("nvfp4", true));
  const Checkpoint full(full_dir), sliced(sliced_dir);
  const auto kept = full.config().stored_experts(1);
  ASSERT_EQ(kept.size(), 4u);
  EXPECT_EQ(sliced.config().stored_experts(1), kept);
  const MoeWeights& f = full.weights().backbone[1].moe;
  const MoeWeights& s = sliced.weights().backbone[1].moe;
  EXPECT_EQ(f.router.out, 8);
  EXPECT_EQ(s.router.out, 4);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(f.original_id[i], kept[i]);
    EXPECT_EQ(f.logit_column[i], kept[i]);
    EXPECT_EQ(s.original_id[i], kept[i]);
    EXPECT_EQ(s.logit_column[i], static_cast<int32_t>(i));
  }
  // Every tensor of the full-router pruned checkpoint is byte-identical to the unpruned one.
  const TensorMap pf = read_all(full_dir);
  EXPECT_EQ(pf.size(), unpruned.size() - 4 * 9);
  for (const auto& [name, t] : pf) {
    ASSERT_TRUE(unpruned.count(name)) << name;
    EXPECT_EQ(t.bytes, unpruned.at(name).bytes) << name;
  }
  // The sliced router holds the unpruned rows in kept order.
  const TensorMap ps = read_all(sliced_dir);
  const std::string router = "backbone.layers.1.mlp.router.weight";
  const auto& rows = ps.at(router).bytes;
  const auto& all = unpruned.at(router).bytes;
  const size_t row_bytes = 64 * 2;
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(
        0, std::memcmp(rows.data() + i * row_bytes, all.data() + kept[i] * row_bytes, row_bytes));
}

TEST_F(CheckpointTest, GenerationIsDeterministic) {
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path a = make("det-a", true, 5, "sliced", 42);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tiny NVFP4 pruned generation: %.1f ms\n", ms);
  EXPECT_LT(ms, 20000.0);
  const fs::path b = make("det-b", true, 5, "sliced", 42);
  const fs::path other = make("det-c", true, 5, "sliced", 43);
  const Manifest ma = load_manifest(a / "manifest.json");
  const Manifest mb = load_manifest(b / "manifest.json");
  ASSERT_EQ(ma.files.size(), mb.files.size());
  for (size_t i = 0; i < ma.files.size(); ++i) {
    EXPECT_EQ(ma.files[i].path, mb.files[i].path);
    EXPECT_EQ(sha256_file(a / ma.files[i].path), sha256_file(b / mb.files[i].path))
        << ma.files[i].path;
  }
  EXPECT_EQ(read_file(a / "manifest.json"), read_file(b / "manifest.json"));
  EXPECT_NE(sha256_file(a / "model-00002-of-00002.safetensors"),
            sha256_file(other / "model-00002-of-00002.safetensors"));
}

TEST_F(CheckpointTest, MiniLoadsFromOneFile) {
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path dir = make("mini", true, {}, "full", kSeed, "mini.json");
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("mini NVFP4 generation: %.1f ms\n", ms);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  const Checkpoint c(dir);
  EXPECT_EQ(c.weights().backbone.size(), 4u);
  const MimiConfig codec = load_mimi_config(dir / "codec/config.json");
  EXPECT_EQ(codec.hidden_size, 128);
}

TEST_F(CheckpointTest, RefusesExistingOutputAndBadOptions) {
  const fs::path dir = make("bf16", false);
  RandomCheckpointOptions o;
  o.config = config("tiny.json");
  EXPECT_THROW(write_random_checkpoint(o, dir), UsageError);
  o.prune_to = 1;  // fewer than experts_per_token
  EXPECT_THROW(write_random_checkpoint(o, root() / "never-1"), UsageError);
  o.prune_to = 9;
  EXPECT_THROW(write_random_checkpoint(o, root() / "never-2"), UsageError);
  o.prune_to.reset();
  o.router_layout = "sliced";  // needs pruning
  EXPECT_THROW(write_random_checkpoint(o, root() / "never-3"), UsageError);
  o.router_layout = "rows";
  o.prune_to = 4;
  EXPECT_THROW(write_random_checkpoint(o, root() / "never-4"), UsageError);
  for (const char* n : {"never-1", "never-2", "never-3", "never-4"})
    EXPECT_FALSE(fs::exists(root() / n));
  // No temporary directory is left behind.
  for (const auto& e : fs::directory_iterator(root()))
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
}

TEST_F(CheckpointTest, CodecHasHuggingFaceMimiLayout) {
  // The small MimiModel state dict listed in the spec's hf-layouts.txt, regenerated here.
  MimiConfig c = small_codec_config(64, 8);
  c.hidden_size = 64;
  c.upsample_groups = 64;
  c.codebook_dim = c.vector_quantization_hidden_dimension = 32;
  c.intermediate_size = 128;
  c.head_dim = 16;
  const fs::path dir = root() / "codec-layout";
  fs::create_directories(dir);
  write_random_codec(c, kSeed, dir);
  const TensorSet set = TensorSet::single(dir / "model.safetensors");
  std::istringstream want(kHfMimiLayout);
  std::string name, shape;
  size_t count = 0;
  while (want >> name >> shape) {
    ++count;
    const TensorInfo* t = set.find(name);
    ASSERT_NE(t, nullptr) << name;
    std::string got;
    for (size_t i = 0; i < t->shape.size(); ++i)
      got += (i ? "x" : "") + std::to_string(t->shape[i]);
    EXPECT_EQ(got, shape) << name;
    EXPECT_EQ(t->dtype, DType::F32) << name;
  }
  EXPECT_EQ(set.names().size(), count);
  const MimiConfig back = load_mimi_config(dir / "config.json");
  EXPECT_EQ(back.hidden_size, 64);
}

// --- refusals, each from a crafted directory ---

TEST_F(CheckpointTest, RefusesMissingTensor) {
  TensorMap t = read_all(make("bf16", false));
  t.erase("backbone.norm.weight");
  expect_refused(craft(make("bf16", false), root() / "x-missing", t),
                 {"missing tensor backbone.norm.weight"});
}

TEST_F(CheckpointTest, RefusesWrongShapeAndDtypeTogether) {
  TensorMap t = read_all(make("bf16", false));
  t["text_embed.weight"].shape = {130, 128};
  Stored& norm = t["tower.norm.weight"];
  norm = {DType::F32, {32}, std::vector<uint8_t>(32 * 4, 0)};
  expect_refused(craft(make("bf16", false), root() / "x-shape", t),
                 {"2 problems", "text_embed.weight has shape [130, 128], expected [260, 64]",
                  "tower.norm.weight has dtype F32, expected BF16"});
}

TEST_F(CheckpointTest, RefusesExpertBeyondNumExpertsAndStrayTensor) {
  TensorMap t = read_all(make("bf16", false));
  t["backbone.layers.1.mlp.experts.8.gate_proj.weight"] =
      t["backbone.layers.1.mlp.experts.0.gate_proj.weight"];
  t["lm_head.weight"] = t["codebook0_head.weight"];
  expect_refused(craft(make("bf16", false), root() / "x-extra", t),
                 {"unexpected tensor backbone.layers.1.mlp.experts.8.gate_proj.weight (expert 8 is "
                  "beyond num_experts = 8)",
                  "unexpected tensor lm_head.weight"});
}

TEST_F(CheckpointTest, RefusesUnlistedExpertInPrunedCheckpoint) {
  const fs::path src = make("pruned-full", true, 4, "full");
  const auto kept = Checkpoint(src).config().stored_experts(1);
  int64_t absent = 0;
  while (std::find(kept.begin(), kept.end(), absent) != kept.end()) ++absent;
  const TensorMap unpruned = read_all(make("nvfp4", true));
  TensorMap t = read_all(src);
  const std::string p = "backbone.layers.1.mlp.experts." + std::to_string(absent) + ".";
  for (const auto& [name, v] : unpruned)
    if (name.rfind(p, 0) == 0) t[name] = v;
  expect_refused(
      craft(src, root() / "x-unlisted", t),
      {"unexpected tensor " + p + "down_proj.weight", "is not listed in kept_experts[1]"});
}

TEST_F(CheckpointTest, RefusesPrunedLayerMissingKeptExpert) {
  const fs::path src = make("pruned-sliced", true, 4, "sliced");
  const auto kept = Checkpoint(src).config().stored_experts(1);
  TensorMap t = read_all(src);
  const std::string p = "backbone.layers.1.mlp.experts." + std::to_string(kept[2]) + ".up_proj.";
  for (const char* s : {"weight", "weight_scale", "weight_scale_2"}) t.erase(p + s);
  expect_refused(craft(src, root() / "x-kept", t), {"missing tensor " + p + "weight"});
}

TEST_F(CheckpointTest, RefusesIncompleteNvfp4Triple) {
  TensorMap t = read_all(make("nvfp4", true));
  t.erase("backbone.layers.1.mlp.experts.3.down_proj.weight_scale_2");
  t.erase("backbone.layers.1.mlp.experts.5.gate_proj.weight_scale");
  expect_refused(craft(make("nvfp4", true), root() / "x-triple", t),
                 {"incomplete NVFP4 triple: missing tensor "
                  "backbone.layers.1.mlp.experts.3.down_proj.weight_scale_2",
                  "incomplete NVFP4 triple: missing tensor "
                  "backbone.layers.1.mlp.experts.5.gate_proj.weight_scale"});
}

TEST_F(CheckpointTest, RefusesMixedTripleAndBadScales) {
  TensorMap bf = read_all(make("bf16", false));
  const TensorMap nv = read_all(make("nvfp4", true));
  bf["backbone.layers.1.mlp.experts.2.up_proj.weight_scale"] =
      nv.at("backbone.layers.1.mlp.experts.2.up_proj.weight_scale");
  expect_refused(craft(make("nvfp4", true), root() / "x-mixed", bf),
                 {"backbone.layers.1.mlp.experts.2.up_proj.weight is BF16 but "
                  "backbone.layers.1.mlp.experts.2.up_proj.weight_scale is present"});
  TensorMap t = nv;
  t["backbone.layers.1.mlp.experts.0.gate_proj.weight_scale"].dtype = DType::U8;
  const float zero = 0.0f;
  std::memcpy(t["backbone.layers.1.mlp.experts.1.gate_proj.weight_scale_2"].bytes.data(), &zero, 4);
  t["backbone.layers.1.mlp.experts.4.gate_proj.input_scale"] = {
      DType::F32, {1}, std::vector<uint8_t>(4, 0)};
  expect_refused(craft(make("nvfp4", true), root() / "x-scales", t),
                 {"experts.0.gate_proj.weight_scale has dtype U8, expected F8_E4M3",
                  "experts.1.gate_proj.weight_scale_2 must be positive",
                  "experts.4.gate_proj.input_scale has shape [1], expected []"});
}

TEST_F(CheckpointTest, RefusesNvfp4WithoutQuantConfig) {
  const fs::path src = make("nvfp4", true);
  const fs::path dst = craft(src, root() / "x-noquant", read_all(src));
  fs::remove(dst / "hf_quant_config.json");
  expect_refused(dst, {"1 problem:", "is NVFP4 but the checkpoint has no hf_quant_config.json"});
}

TEST_F(CheckpointTest, RefusesBadRouterRowCount) {
  const fs::path src = make("pruned-full", true, 4, "full");
  TensorMap t = read_all(src);
  Stored& r = t["backbone.layers.1.mlp.router.weight"];
  r.shape = {5, 64};
  r.bytes.resize(5 * 64 * 2);
  expect_refused(craft(src, root() / "x-router", t),
                 {"backbone.layers.1.mlp.router.weight has 5 rows, expected num_experts (8) or the "
                  "number of stored experts (4)"});
}

TEST_F(CheckpointTest, ListsAtMostTwentyProblems) {
  TensorMap t = read_all(make("bf16", false));
  for (auto it = t.begin(); it != t.end();)
    it = it->first.rfind("tower.", 0) == 0 ? t.erase(it) : std::next(it);
  try {
    Checkpoint c(craft(make("bf16", false), root() / "x-many", t));
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("and "), std::string::npos);
    EXPECT_NE(msg.find(" more"), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 4000u);
  }
}

}  // namespace
}  // namespace drama
