// `drama logits`: teacher-forced logits for parity tools (interfaces.md). Row t of each tensor
// predicts frame t of the codes file from the prompt and frames < t.
#include <optional>

#include "cli/commands.h"
#include "cli/weights_options.h"
#include "format/checkpoint.h"
#include "format/safetensors.h"
#include "format/voice.h"
#include "model/drama3_model.h"
#include "model/prompt.h"
#include "util/error.h"
#include "util/fs.h"

namespace drama::cli {

namespace {

struct LogitsOptions {
  std::string text, voice, codes, output;
  WeightsOptions weights;
};

int run_logits(const LogitsOptions& o) {
  ResolvedCheckpoint resolved = resolve_weights(o.weights);
  Checkpoint ckpt(resolved.dir, o.weights.residency());
  const Drama3Config& c = ckpt.config();
  auto backend = make_backend(o.weights.backend);
  Drama3Model model(ckpt, *backend);
  const Voice codes = read_codes(o.codes);
  if (codes.num_codebooks != c.audio.num_codebooks)
    throw Error(o.codes + ": " + std::to_string(codes.num_codebooks) +
                " codebooks, the model has " + std::to_string(c.audio.num_codebooks));
  check_codes(c, codes.codes, o.codes);
  std::optional<Voice> voice;
  if (!o.voice.empty()) {
    voice = read_voice(o.voice);
    const auto codec = resolved.dir / "codec" / "model.safetensors";
    check_voice(c, *voice, std::filesystem::exists(codec) ? sha256_file(codec) : "");
  }
  const int64_t F = codes.frames, K = c.audio.num_codebooks, cs = c.audio.codebook_size;
  SafetensorsWriter out;
  auto add = [&](const std::string& branch, const Prompt& prompt) {
    const TeacherForcedLogits l = model.teacher_forced(prompt, codes.codes, F);
    out.add_typed<float>(branch + ".codebook0", DType::F32, {F, cs + 1}, l.codebook0);
    out.add_typed<float>(branch + ".tower", DType::F32, {F, K - 1, cs}, l.tower);
  };
  if (voice) {
    add("cond", conditional_prompt(c, o.text, *voice));
    add("uncond", unconditional_prompt(c, o.text));
  } else {
    add("cond", unconditional_prompt(c, o.text));
  }
  out.set_metadata("format", "drama-logits/1");
  out.write(o.output);
  return 0;
}

}  // namespace

void register_logits(CLI::App& app, Runner& run) {
  auto o = std::make_shared<LogitsOptions>();
  auto* sub = app.add_subcommand("logits", "Teacher-forced logits for parity tools");
  sub->add_option("--text", o->text, "Target text")->required();
  sub->add_option("--voice", o->voice, "Voice file (adds the unconditional branch)");
  sub->add_option("--codes", o->codes, "Codes file (int32 codes [F, K])")->required();
  sub->add_option("-o,--output", o->output, "Output safetensors")->required();
  add_weights_options(*sub, o->weights);
  sub->callback([&run, o] { run = [o] { return run_logits(*o); }; });
}

}  // namespace drama::cli
