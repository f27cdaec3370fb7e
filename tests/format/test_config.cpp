// config.json, hf_quant_config.json and codec config parsing (spec sections 2, 3, 5): defaults,
// and one refusal per validated field, each naming the file and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "format/config.h"
#include "format/mimi_config.h"
#include "format/random_checkpoint.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path source_dir() {
  const char* s = std::getenv("DRAMA_SOURCE_DIR");
  return s ? fs::path(s) : fs::path(__FILE__).parent_path().parent_path().parent_path();
}

json tiny() {
  return json::parse(read_text_file(source_dir() / "configs/tiny.json"));
}

// Expects parse to fail with a message naming `field`.
void expect_refused(const std::function<void(json&)>& edit, const std::string& field) {
  json j = tiny();
  edit(j);
  try {
    parse_drama3_config(j, "cfg.json");
    ADD_FAILURE() << "accepted a config with a bad " << field;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos)
        << "message does not name " << field << ": " << msg;
  }
}

TEST(Config, ShippedConfigsParse) {
  for (const char* name : {"tiny.json", "mini.json", "bench-30b-a3b.json", "cpu-bench.json"}) {
    const Drama3Config c = load_drama3_config(source_dir() / "configs" / name);
    EXPECT_EQ(c.audio.eos_code, c.audio.codebook_size) << name;
    if (c.raw.contains("codec")) {
      const MimiConfig m = parse_mimi_config(c.raw["codec"], name);
      EXPECT_EQ(m.frame_rate(), c.audio.frame_rate) << name;
      EXPECT_EQ(m.codebook_size, c.audio.codebook_size) << name;
    }
  }
}

TEST(Config, TinyValuesAndHelpers) {
  const Drama3Config c = parse_drama3_config(tiny());
  EXPECT_EQ(c.backbone.hidden_size, 64);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_TRUE(c.is_dense_layer(0));
  EXPECT_FALSE(c.is_dense_layer(1));
  EXPECT_TRUE(c.stored_experts(0).empty());
  EXPECT_EQ(c.stored_experts(1).size(), 8u);
  EXPECT_FALSE(c.moe.kept_experts.has_value());
}

TEST(Config, DefaultsApplyToOptionalFields) {
  json j = tiny();
  j.erase("sampling");
  j.erase("guidance");
  j["backbone"].erase("rope_theta");
  j["backbone"].erase("rms_norm_eps");
  j["tower"].erase("rope_theta");
  j["text"] = json::object();
  j["audio"] = {{"num_codebooks", 4}, {"codebook_size", 64}};
  j["backbone"]["moe"].erase("dense_layers");
  j["backbone"]["moe"].erase("norm_topk_prob");
  const Drama3Config c = parse_drama3_config(j);
  EXPECT_EQ(c.sampling.temperature, 0.9);
  EXPECT_EQ(c.sampling.top_k, 50);
  EXPECT_EQ(c.default_gamma, 1.5);
  EXPECT_EQ(c.backbone.rope_theta, 1000000.0);
  EXPECT_EQ(c.tower.rope_theta, 10000.0);
  EXPECT_EQ(c.backbone.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.text.vocab_size, 260);
  EXPECT_EQ(c.audio.eos_code, 64);
  EXPECT_EQ(c.audio.sample_rate, 24000);
  EXPECT_EQ(c.moe.dense_layers, std::vector<int64_t>{0});
  EXPECT_TRUE(c.moe.norm_topk_prob);
}

TEST(Config, KeptExpertsParse) {
  json j = tiny();
  j["backbone"]["moe"]["kept_experts"] = {nullptr, {1, 4, 6}};
  const Drama3Config c = parse_drama3_config(j);
  ASSERT_TRUE(c.moe.kept_experts.has_value());
  EXPECT_EQ(c.stored_experts(1), (std::vector<int64_t>{1, 4, 6}));
}

TEST(Config, Refusals) {
  expect_refused([](json& j) { j["model_type"] = "qwen3_moe"; }, "model_type");
  expect_refused([](json& j) { j.erase("model_type"); }, "model_type");
  expect_refused([](json& j) { j["text"]["frontend"] = "bpe"; }, "text.frontend");
  expect_refused([](json& j) { j["text"]["vocab_size"] = 0; }, "text.vocab_size");
  expect_refused([](json& j) { j["text"]["bos_id"] = 65; }, "text.bos_id");
  expect_refused([](json& j) { j["text"]["pad_id"] = 300; }, "text.pad_id");
  expect_refused([](json& j) { j["text"]["eos_id"] = 256; }, "text.bos_id");
  expect_refused([](json& j) { j["text"]["vocabsize"] = 260; }, "text.vocabsize");
  expect_refused([](json& j) { j.erase("audio"); }, "audio");
  expect_refused([](json& j) { j["audio"]["num_codebooks"] = 1; }, "audio.num_codebooks");
  expect_refused([](json& j) { j["audio"]["codebook_size"] = -4; }, "audio.codebook_size");
  expect_refused([](json& j) { j["audio"]["eos_code"] = 0; }, "audio.eos_code");
  expect_refused([](json& j) { j["audio"]["frame_rate"] = 0; }, "audio.frame_rate");
  expect_refused([](json& j) { j["audio"]["sample_rate"] = "24k"; }, "audio.sample_rate");
  for (const char* f : {"hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                        "intermediate_size", "max_position_embeddings"}) {
    expect_refused([f](json& j) { j["backbone"][f] = 0; }, std::string("backbone.") + f);
    expect_refused([f](json& j) { j["backbone"].erase(f); }, std::string("backbone.") + f);
  }
  for (const char* f :
       {"hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size"})
    expect_refused([f](json& j) { j["tower"][f] = -1; }, std::string("tower.") + f);
  expect_refused([](json& j) { j["backbone"]["num_kv_heads"] = 3; }, "backbone.num_heads");
  expect_refused([](json& j) { j["tower"]["num_kv_heads"] = 3; }, "tower.num_heads");
  expect_refused([](json& j) { j["backbone"]["head_dim"] = 15; }, "backbone.head_dim");
  expect_refused([](json& j) { j["backbone"]["rms_norm_eps"] = 0; }, "backbone.rms_norm_eps");
  expect_refused([](json& j) { j["tower"]["rope_theta"] = -1.0; }, "tower.rope_theta");
  expect_refused([](json& j) { j["tower"]["max_position_embeddings"] = 8; },
                 "tower.max_position_embeddings");
  auto moe = [](const char* f) { return std::string("backbone.moe.") + f; };
  expect_refused([](json& j) { j["backbone"].erase("moe"); }, "backbone.moe");
  expect_refused([](json& j) { j["backbone"]["moe"]["num_experts"] = 0; }, moe("num_experts"));
  expect_refused([](json& j) { j["backbone"]["moe"]["experts_per_token"] = 9; },
                 moe("experts_per_token"));
  expect_refused([](json& j) { j["backbone"]["moe"]["expert_intermediate_size"] = 0; },
                 moe("expert_intermediate_size"));
  expect_refused([](json& j) { j["backbone"]["moe"]["norm_topk_prob"] = 1; },
                 moe("norm_topk_prob"));
  expect_refused([](json& j) { j["backbone"]["moe"]["shared_expert_intermediate_size"] = -1; },
                 moe("shared_expert_intermediate_size"));
  expect_refused([](json& j) { j["backbone"]["moe"]["dense_layers"] = {2}; }, moe("dense_layers"));
  expect_refused(
      [](json& j) {
        j["backbone"]["moe"]["dense_layers"] = {0, 0};
      },
      moe("dense_layers"));
  expect_refused([](json& j) { j["backbone"]["moe"]["kept_experts"] = {nullptr}; },
                 moe("kept_experts"));
  expect_refused(
      [](json& j) {
        j["backbone"]["moe"]["kept_experts"] = {{1, 2}, {1, 2}};
      },
      moe("kept_experts[0]"));
  expect_refused(
      [](json& j) {
        j["backbone"]["moe"]["kept_experts"] = {nullptr, nullptr};
      },
      moe("kept_experts[1]"));
  expect_refused(
      [](json& j) {
        j["backbone"]["moe"]["kept_experts"] = {nullptr, {3, 1}};
      },
      moe("kept_experts[1]"));
  expect_refused(
      [](json& j) {
        j["backbone"]["moe"]["kept_experts"] = {nullptr, {1, 1, 2}};
      },
      moe("kept_experts[1]"));
  expect_refused(
      [](json& j) {
        j["backbone"]["moe"]["kept_experts"] = {nullptr, {1, 8}};
      },
      moe("kept_experts[1]"));
  expect_refused(
      [](json& j) {
        j["backbone"]["moe"]["kept_experts"] = {nullptr, {5}};
      },
      moe("kept_experts[1]"));
  expect_refused([](json& j) { j["guidance"]["default_gamma"] = -1; }, "guidance.default_gamma");
  expect_refused([](json& j) { j["sampling"]["temperature"] = -0.1; }, "sampling.temperature");
  expect_refused([](json& j) { j["sampling"]["top_k"] = -1; }, "sampling.top_k");
  expect_refused([](json& j) { j["sampling"]["top_p"] = 0; }, "sampling.top_p");
  expect_refused([](json& j) { j["sampling"]["top_p"] = 1.5; }, "sampling.top_p");
  expect_refused([](json& j) { j["sampling"]["topp"] = 1.0; }, "sampling.topp");
}

TEST(Config, LoadNamesTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("drama-config-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_text_file_atomic(dir / "config.json", "{not json");
  EXPECT_THROW(
      {
        try {
          load_drama3_config(dir / "config.json");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos);
          throw;
        }
      },
      Error);
  fs::remove_all(dir);
}

TEST(QuantConfig, AbsentMeansBf16AndNvfp4Parses) {
  const fs::path dir = fs::temp_directory_path() / ("drama-quant-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_FALSE(load_quant_config(dir).has_value());
  auto write = [&](const json& j) {
    write_text_file_atomic(dir / "hf_quant_config.json", j.dump());
  };
  write({{"producer", {{"name", "modelopt"}, {"version", "0.29"}}},
         {"quantization",
          {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"exclude_modules", {"lm_head"}}}}});
  const auto q = load_quant_config(dir);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->quant_algo, "NVFP4");
  EXPECT_EQ(q->exclude_modules, std::vector<std::string>{"lm_head"});
  auto refused = [&](const json& j, const std::string& field) {
    write(j);
    try {
      load_quant_config(dir);
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("hf_quant_config.json"), std::string::npos);
    }
  };
  refused({{"quantization", {{"quant_algo", "FP8"}, {"group_size", 16}}}},
          "quantization.quant_algo");
  refused({{"quantization", {{"quant_algo", "NVFP4"}, {"group_size", 32}}}},
          "quantization.group_size");
  refused({{"quantization", {{"quant_algo", "NVFP4"}, {"exclude_modules", "x"}}}},
          "quantization.exclude_modules");
  refused({{"quant_algo", "NVFP4"}}, "quantization");
  fs::remove_all(dir);
}

TEST(MimiConfig, HuggingFaceDefaultsAndRefusals) {
  const MimiConfig d = parse_mimi_config(json::object(), "codec/config.json");
  EXPECT_EQ(d.hidden_size, 512);
  EXPECT_EQ(d.num_quantizers, 32);
  EXPECT_EQ(d.frame_rate(), 12.5);
  EXPECT_EQ(d.samples_per_frame(), 1920);
  // HF 5.x nests rope_theta; 4.x wrote it at the top level.
  EXPECT_EQ(parse_mimi_config(json{{"rope_parameters", {{"rope_theta", 5.0}}}}, "c").rope_theta,
            5.0);
  EXPECT_EQ(parse_mimi_config(json{{"rope_theta", 7.0}}, "c").rope_theta, 7.0);
  const MimiConfig small = small_codec_config(64, 4);
  const MimiConfig round = parse_mimi_config(mimi_config_to_json(small), "c");
  EXPECT_EQ(round.hidden_size, 32);
  EXPECT_EQ(round.frame_rate(), 12.5);
  auto refused = [](const json& j, const std::string& field) {
    try {
      parse_mimi_config(j, "codec/config.json");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused({{"hidden_size", 0}}, "hidden_size");
  refused({{"upsampling_ratios", json::array()}}, "upsampling_ratios");
  refused({{"codebook_size", 1000}}, "codebook_size");
  refused({{"codebook_dim", 128}}, "codebook_dim");
  refused({{"num_semantic_quantizers", 40}}, "num_semantic_quantizers");
  refused({{"num_key_value_heads", 3}}, "num_attention_heads");
  refused({{"hidden_act", "relu"}}, "hidden_act");
  refused({{"pad_mode", "circular"}}, "pad_mode");
  refused({{"upsample_groups", 3}}, "upsample_groups");
  refused({{"frame_rate", 25.0}}, "frame_rate");
  refused({{"audio_channels", 3}}, "audio_channels");
}

}  // namespace
}  // namespace drama
