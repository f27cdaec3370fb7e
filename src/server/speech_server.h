// The OpenAI-compatible speech server (interfaces.md, HTTP): routes, admission, streaming and
// voices on top of any Engine (the real one, or a fake in tests). Knows nothing about kernels.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/admission.h"
#include "server/metrics.h"
#include "server/voice_store.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace drama::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: pick a free port
  CfgMode cfg = CfgMode::Paired;
  float gamma = 1.5f;
  bool request_gamma = false;
  std::filesystem::path voices_dir;  // empty: nothing can be stored (built-in voices still serve)
  // The loaded checkpoint's built-in voices (format/builtin_voices.h): listed with
  // "built_in": true, usable by id, never deleted, their ids never given to a stored voice.
  std::vector<BuiltinVoice> builtin_voices;
  int max_queue = 4;
  std::string provenance;
  size_t max_body_bytes = 16u << 20;
  int read_timeout_s = 10;  // a client that sends part of a request and stalls is dropped
  int write_timeout_s = 10;
  int http_threads = 0;  // 0: max_queue + 8
  // Set: every /v1/* route requires `Authorization: Bearer <key>` (server/auth.h).
  std::optional<std::string> api_key;
  // --voice-alias NAME=ID: a request's voice NAME (e.g. OpenAI's "alloy") means stored voice ID.
  std::map<std::string, std::string> voice_aliases;
};

class SpeechServer {
 public:
  SpeechServer(Engine& engine, ServerOptions options);
  ~SpeechServer();
  SpeechServer(const SpeechServer&) = delete;
  SpeechServer& operator=(const SpeechServer&) = delete;

  // Binds the listening socket; returns the port (useful with port 0). Throws drama::Error.
  int bind();
  // Serves until stop(); returns once every connection thread has finished.
  void run();
  // Thread-safe: stop accepting, cancel the running generation, refuse waiters.
  void stop();

  const ServerOptions& options() const { return options_; }
  Metrics& metrics() { return metrics_; }

 private:
  void install_routes();
  void handle_speech(const httplib::Request& req, httplib::Response& res);
  void handle_voices_list(const httplib::Request& req, httplib::Response& res);
  void handle_voice_add(const httplib::Request& req, httplib::Response& res);
  void handle_voice_delete(const httplib::Request& req, httplib::Response& res);
  void handle_models(const httplib::Request& req, httplib::Response& res);
  void handle_health(const httplib::Request& req, httplib::Response& res);
  void handle_metrics(const httplib::Request& req, httplib::Response& res);
  void handle_page(const httplib::Request& req, httplib::Response& res);
  // The 404 for an unknown voice, listing the ids (and aliases) a request may name.
  [[noreturn]] void voice_not_found(const std::string& id, const char* param) const;
  uint64_t random_seed();

  Engine& engine_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<VoiceStore> voices_;
  Admission admission_;
  Metrics metrics_;
  std::mutex rng_mutex_;
  std::mt19937_64 rng_;
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<bool> run_entered_{false};
  std::atomic<bool> stop_requested_{false};
};

}  // namespace drama::server
