// `drama serve` (interfaces.md): resolve and verify the checkpoint, take the device lock, load the
// engine, serve HTTP until SIGTERM/SIGINT, then stop accepting, cancel in-flight work, release the
// lock and exit 0. Prints one line with the bound address when ready (tests parse it).
#include <malloc.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/weights_options.h"
#include "engine/engine.h"
#include "format/builtin_voices.h"
#include "server/auth.h"
#include "server/request_log.h"
#include "server/speech_request.h"
#include "server/speech_server.h"
#include "util/error.h"

namespace drama::cli {

namespace {

// The default lanes, chosen by measurement on the default model (docs/server.md, "Lanes").
constexpr int kDefaultLanes = 4;

struct ServeOptions {
  WeightsOptions weights;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string cfg = "paired";
  std::optional<float> gamma;
  bool request_gamma = false;
  std::string voices;
  int max_queue = 4;
  int lanes = kDefaultLanes;
  int64_t context = 0;
  int read_timeout_s = 10;
  std::string api_key, api_key_file;
  std::vector<std::string> voice_aliases;
};

// --voice-alias NAME=ID, both voice ids ([A-Za-z0-9_-]{1,64}).
std::map<std::string, std::string> parse_voice_aliases(const std::vector<std::string>& specs) {
  std::map<std::string, std::string> out;
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    const std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
    const std::string id = eq == std::string::npos ? "" : spec.substr(eq + 1);
    if (!server::is_valid_voice_id(name) || !server::is_valid_voice_id(id))
      throw UsageError("--voice-alias " + spec +
                       ": expected NAME=ID, both 1 to 64 characters from [A-Za-z0-9_-]");
    if (!out.emplace(name, id).second)
      throw UsageError("--voice-alias " + name + " is given twice");
  }
  return out;
}

int run_serve(const ServeOptions& o) {
  // Signals are taken by one thread through sigwait; every thread started from here on
  // (engine pools, HTTP workers) inherits the blocked mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a dead server
  // Two malloc arenas for the whole process instead of one per HTTP worker thread (glibc's
  // default allows 8 per core): the workers allocate little, and per-thread arenas made resident
  // memory depend on how many workers had run yet (the load test saw 31-34 MiB after 20 requests
  // for the same 35 MiB after 200).
  mallopt(M_ARENA_MAX, 2);

  // Option mistakes are refused before the checkpoint loads.
  const std::optional<std::string> api_key = server::resolve_api_key(o.api_key, o.api_key_file);
  const auto voice_aliases = parse_voice_aliases(o.voice_aliases);
  ResolvedCheckpoint resolved = resolve_weights(o.weights);
  // Built-in voices are files of the checkpoint: verified with it, before the engine loads.
  std::vector<BuiltinVoice> builtin = load_builtin_voices(resolved.dir, resolved.manifest);
  EngineOptions eo;
  eo.backend = o.weights.backend;
  eo.weights = o.weights.residency();
  eo.default_cfg = o.cfg == "separate" ? CfgMode::Separate : CfgMode::Paired;
  eo.lanes = o.lanes;
  eo.context = o.context;
  std::unique_ptr<Engine> engine = load_engine(resolved.dir, eo);

  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.cfg = eo.default_cfg;
  so.gamma = o.gamma ? *o.gamma : engine->default_gamma();
  so.request_gamma = o.request_gamma;
  so.voices_dir =
      o.voices.empty() ? default_cache_dir() / "voices" : std::filesystem::path(o.voices);
  so.max_queue = o.max_queue;
  so.provenance = resolved.provenance;
  so.read_timeout_s = o.read_timeout_s;
  so.api_key = api_key;
  so.voice_aliases = voice_aliases;
  std::string builtin_ids;
  for (const auto& v : builtin) builtin_ids += (builtin_ids.empty() ? "" : ", ") + v.id;
  so.builtin_voices = std::move(builtin);
  server::SpeechServer server(*engine, so);
  int port = server.bind();

  std::atomic<bool> finished{false};
  std::thread signal_thread([&] {
    timespec tick{0, 200 * 1000 * 1000};
    while (!finished) {
      int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (sig == SIGTERM || sig == SIGINT) {
        server::log_info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                         ": stopping");
        server.stop();
        return;
      }
    }
  });
  server::log_info("model " + engine->model_name() + " (" + resolved.provenance + ") on " +
                   engine->backend_name() + ", cfg " + o.cfg + ", gamma " +
                   std::to_string(so.gamma) + (so.request_gamma ? ", request gamma allowed" : ""));
  server::log_info("built-in voices: " + (builtin_ids.empty() ? "none" : builtin_ids));
  if (!api_key && !server::is_loopback_host(o.host))
    server::log_warning("listening on " + o.host +
                        " beyond loopback without an API key: anyone who can reach the port can "
                        "synthesize and add or delete voices (set --api-key, --api-key-file or "
                        "DRAMA_API_KEY)");
  std::printf("drama serve: listening on http://%s:%d\n", o.host.c_str(), port);
  std::fflush(stdout);
  server.run();
  finished = true;
  signal_thread.join();
  server::log_info("stopped");
  return 0;  // the engine, then the device lock, are released on the way out
}

}  // namespace

void register_serve(CLI::App& app, Runner& run) {
  auto o = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand("serve", "Serve the OpenAI-compatible speech API");
  add_weights_options(*sub, o->weights);
  sub->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", o->port, "Port to listen on (0 = pick a free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--cfg", o->cfg, "paired or separate guidance execution")
      ->check(CLI::IsMember({"paired", "separate"}))
      ->capture_default_str();
  sub->add_option("--gamma", o->gamma, "Guidance scale (default: the checkpoint's; 1 = none)")
      ->check(CLI::Range(0.0f, 10.0f));
  sub->add_flag("--request-gamma", o->request_gamma,
                "Let a request set its own guidance (cfg_scale)");
  sub->add_option("--voices", o->voices, "Voices directory (default: <cache>/voices)");
  sub->add_option("--max-queue", o->max_queue, "Requests that may wait; more are refused busy")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  sub->add_option("--lanes", o->lanes,
                  "Generations that run together in one batched step (docs/server.md)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  sub->add_option("--context", o->context,
                  "Positions each generation's caches hold, prompt and frames (default 0: the "
                  "model's max_position_embeddings); KV memory per lane is proportional to it")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--read-timeout", o->read_timeout_s,
                  "Seconds a client may stall while sending a request")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  sub->add_option("--api-key", o->api_key,
                  "Require Authorization: Bearer KEY on every /v1/* route (default: "
                  "$DRAMA_API_KEY; none = open)");
  sub->add_option("--api-key-file", o->api_key_file,
                  "Read the API key from this file's first line");
  sub->add_option("--voice-alias", o->voice_aliases,
                  "NAME=ID: a request's voice NAME (e.g. OpenAI's alloy) means stored voice ID; "
                  "repeatable");
  sub->callback([&run, o] { run = [o] { return run_serve(*o); }; });
}

}  // namespace drama::cli
