// Routes and request flow. Every request is handled, streamed and logged on one httplib worker
// thread, so a thread-local record collects what the log line and the metrics need.
#include "server/speech_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "audio/audio_io.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/base64.h"
#include "server/connection_watch.h"
#include "server/reply_audio.h"
#include "server/request_log.h"
#include "server/speech_request.h"
#include "server/web_assets.h"
#include "util/error.h"
#include "util/request_rules.h"

namespace drama::server {

namespace {

using nlohmann::json;

// The voice writer's rule (util/request_rules.h), as `drama voice write` applies it: on the
// decoded audio at its own rate, before any resampling (a reference too long is refused before
// the resampler spends time on it), then resampled to the codec's rate.
std::vector<float> checked_reference_at_rate(std::span<const uint8_t> bytes,
                                             const std::string& label, int64_t rate) {
  const DecodedAudio audio = read_audio_memory(bytes, label);
  if (audio.mono.empty()) throw Error(label + ": the audio holds no samples.");
  float peak = 0;
  for (float x : audio.mono) peak = std::max(peak, std::fabs(x));
  rules::check_reference(audio.seconds(), peak, label);
  return resample_audio(audio.mono, audio.sample_rate, rate);
}

// Listens again on `sock` with the system's largest backlog (SOMAXCONN, capped by
// net.core.somaxconn): Linux takes a second listen() on a listening socket as a new backlog. Only
// on the socket the server bound: listening, and on `port`.
void widen_listen_backlog(int sock, int port) {
  int accepting = 0;
  socklen_t len = sizeof accepting;
  sockaddr_storage addr{};
  socklen_t addr_len = sizeof addr;
  const bool ours =
      sock >= 0 && getsockopt(sock, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) == 0 &&
      accepting == 1 && getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &addr_len) == 0 &&
      ((addr.ss_family == AF_INET &&
        ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port) == port) ||
       (addr.ss_family == AF_INET6 &&
        ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port) == port));
  if (!ours || ::listen(sock, SOMAXCONN) != 0)
    throw Error("cannot widen the listen backlog of port " + std::to_string(port));
}

thread_local RequestLogLine t_log;
thread_local bool t_log_active = false;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), error_body(e.status(), e.code(), e.what(), e.param()));
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "TE: trailers": the client takes HTTP trailers, so a streamed reply can end with one.
bool accepts_trailers(const httplib::Request& req) {
  return lower(req.get_header_value("TE")).find("trailers") != std::string::npos;
}

// The media type without parameters, lower case.
std::string media_type(const httplib::Request& req) {
  std::string ct = lower(req.get_header_value("Content-Type"));
  auto semi = ct.find(';');
  if (semi != std::string::npos) ct = ct.substr(0, semi);
  while (!ct.empty() && ct.back() == ' ') ct.pop_back();
  return ct;
}

std::string outcome_for_status(int status) {
  if (status < 400) return "ok";
  switch (status) {
    case 400:
      return "bad_request";
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 408:
      return "timeout";
    case 413:
      return "too_large";
    case 415:
      return "unsupported_media_type";
    case 503:
      return "busy";
    default:
      return "error";
  }
}

json voice_json(const VoiceInfo& v) {
  return {{"id", v.id},         {"name", v.name},       {"transcript", v.transcript},
          {"frames", v.frames}, {"created", v.created}, {"built_in", v.built_in}};
}

// Generation bookkeeping shared by the whole and streamed paths.
struct Generation {
  SpeechRequest request;
  std::shared_ptr<const Voice> voice;
  AudioFormat format = AudioFormat::Wav;
  StreamMode stream = StreamMode::None;
  std::unique_ptr<Admission::Lane> lane;
  int64_t sample_rate = 24000;
  double speed = 1.0;
  size_t input_bytes = 0;
  std::optional<ConnectionWatch> connection;
  // Polled after every frame: a client that hung up stops the generation before the next one.
  bool client_gone() const { return connection && connection->peer_closed(); }
};

}  // namespace

SpeechServer::SpeechServer(Engine& engine, ServerOptions options)
    : engine_(engine),
      options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()),
      admission_(static_cast<int>(engine.stats().lanes), options_.max_queue),
      rng_(std::random_device{}()) {
  if (options_.max_queue < 0) throw UsageError("--max-queue must be 0 or more");
  if (!options_.voices_dir.empty() || !options_.builtin_voices.empty())
    voices_ = std::make_unique<VoiceStore>(options_.voices_dir, options_.builtin_voices);
  install_routes();
}

SpeechServer::~SpeechServer() = default;

uint64_t SpeechServer::random_seed() {
  std::lock_guard lock(rng_mutex_);
  return rng_();
}

int SpeechServer::bind() {
  // httplib's default sets SO_REUSEPORT, with which a second server binds the same port and the
  // kernel shares connections between both. SO_REUSEADDR alone still allows a restart while old
  // connections sit in TIME_WAIT, but refuses a port that is being listened on.
  // The callback also notes the socket: httplib (Debian's 0.11, compiled) listens with a backlog
  // of 5, and a burst of clients connecting while the accept thread waits for a core found the
  // queue full (connections reset or delayed by a second, tests/server/test_serve_load.cpp).
  auto reuse_address = [](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  };
  int listening = -1;
  http_->set_socket_options([&listening, reuse_address](int sock) {
    reuse_address(sock);
    listening = sock;
  });
  int port = options_.port == 0
                 ? http_->bind_to_any_port(options_.host)
                 : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  http_->set_socket_options(reuse_address);  // no reference to this frame's `listening` kept
  if (port < 0) {
    throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                " (address in use or not available)");
  }
  widen_listen_backlog(listening, port);
  return port;
}

void SpeechServer::run() {
  run_entered_ = true;
  if (stop_requested_) return;
  http_->listen_after_bind();
}

void SpeechServer::stop() {
  admission_.shutdown();
  stop_requested_ = true;
  // httplib's stop() does nothing until listen has started: wait for it if run() is under way.
  for (int i = 0; i < 200 && run_entered_ && !http_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  http_->stop();
}

void SpeechServer::install_routes() {
  auto& s = *http_;
  int threads = options_.http_threads > 0 ? options_.http_threads
                                          : admission_.lanes() + options_.max_queue + 8;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  s.set_read_timeout(options_.read_timeout_s, 0);
  s.set_write_timeout(options_.write_timeout_s, 0);
  // An idle keep-alive connection is dropped as soon as a stalled request would be.
  s.set_keep_alive_timeout(std::min(5, options_.read_timeout_s));
  s.set_payload_max_length(options_.max_body_bytes);

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_log = RequestLogLine{};
    t_log.id = next_request_id_++;
    t_log_active = true;
    // The key is checked before any handler runs: a refused upload reads nothing into the store.
    if (options_.api_key && route_needs_api_key(req.path) &&
        !bearer_matches(req.get_header_value("Authorization"), *options_.api_key)) {
      t_log.route = req.path.size() > 80 ? req.path.substr(0, 80) : req.path;
      const bool sent = req.has_header("Authorization");
      res.set_header("WWW-Authenticate", "Bearer");
      send_json(res, 401,
                error_body(401, "invalid_api_key",
                           sent ? "the API key is wrong: send Authorization: Bearer <key>"
                                : "an API key is required: send Authorization: Bearer <key>"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Fills an error body in for refusals httplib makes itself (404 route, 413, 400 parse errors).
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty() || res.content_length_ > 0)
          return httplib::Server::HandlerResponse::Unhandled;
        std::string code = res.status == 404   ? "route_not_found"
                           : res.status == 413 ? "payload_too_large"
                           : res.status == 405 ? "method_not_allowed"
                           : res.status >= 500 ? "internal_error"
                                               : "bad_request";
        std::string message = res.status == 404   ? "no such route"
                              : res.status == 413 ? "request body is too large"
                              : res.status == 405 ? "method not allowed"
                              : res.status >= 500 ? "internal server error"
                                                  : "malformed HTTP request";
        send_json(res, res.status, error_body(res.status, code, message));
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const ApiError& e) {
          send_error(res, e);
        } catch (const std::exception& e) {
          send_json(res, 500, error_body(500, "internal_error", e.what()));
        } catch (...) {
          send_json(res, 500, error_body(500, "internal_error", "unknown error"));
        }
      });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    RequestLogLine line = t_log_active ? t_log : RequestLogLine{};
    if (!t_log_active) line.id = next_request_id_++;
    t_log_active = false;
    line.method = req.method;
    if (line.route.empty()) line.route = req.path.size() > 80 ? req.path.substr(0, 80) : req.path;
    line.status = res.status;
    if (line.outcome.empty()) line.outcome = outcome_for_status(res.status);
    metrics_.count_request(line.outcome);
    log_request(line);
  });

  auto wrap = [this](void (SpeechServer::*fn)(const httplib::Request&, httplib::Response&),
                     const char* route) {
    return [this, fn, route](const httplib::Request& req, httplib::Response& res) {
      t_log.route = route;
      try {
        (this->*fn)(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const UsageError& e) {
        send_json(res, 400, error_body(400, "invalid_value", e.what()));
      }
    };
  };
  auto not_allowed = [](const char* allow) {
    return [allow](const httplib::Request&, httplib::Response& res) {
      res.set_header("Allow", allow);
      send_json(
          res, 405,
          error_body(405, "method_not_allowed", std::string("method not allowed; use ") + allow));
    };
  };
  auto only = [&](const char* path, const char* allow) {
    // Every method httplib routes that the path does not serve is a 405, not a 404.
    std::string a = allow;
    if (a.find("GET") == std::string::npos) s.Get(path, not_allowed(allow));
    if (a.find("POST") == std::string::npos) s.Post(path, not_allowed(allow));
    if (a.find("DELETE") == std::string::npos) s.Delete(path, not_allowed(allow));
    s.Put(path, not_allowed(allow));
    s.Patch(path, not_allowed(allow));
  };

  s.Post("/v1/audio/speech", wrap(&SpeechServer::handle_speech, "/v1/audio/speech"));
  only("/v1/audio/speech", "POST");
  s.Get("/v1/audio/voices", wrap(&SpeechServer::handle_voices_list, "/v1/audio/voices"));
  s.Post("/v1/audio/voices", wrap(&SpeechServer::handle_voice_add, "/v1/audio/voices"));
  only("/v1/audio/voices", "GET, POST");
  s.Delete(R"(/v1/audio/voices/([^/]+))",
           wrap(&SpeechServer::handle_voice_delete, "/v1/audio/voices/{id}"));
  only(R"(/v1/audio/voices/([^/]+))", "DELETE");
  s.Get("/v1/models", wrap(&SpeechServer::handle_models, "/v1/models"));
  only("/v1/models", "GET");
  s.Get("/health", wrap(&SpeechServer::handle_health, "/health"));
  only("/health", "GET");
  s.Get("/metrics", wrap(&SpeechServer::handle_metrics, "/metrics"));
  only("/metrics", "GET");
  // The web page (web/, embedded at build time): /, /index.html and its assets.
  s.Get(R"(/([A-Za-z0-9_.-]*))", wrap(&SpeechServer::handle_page, "/"));
}

void SpeechServer::handle_page(const httplib::Request& req, httplib::Response& res) {
  std::string name = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  if (name.empty()) name = "index.html";
  const WebAsset* asset = find_web_asset(name);
  if (!asset) throw ApiError(404, "route_not_found", "no such route");
  res.set_header("Cache-Control", "no-cache");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; media-src 'self' blob:; img-src 'self' data:");
  res.set_content(asset->data, asset->size, asset->content_type);
}

void SpeechServer::voice_not_found(const std::string& id, const char* param) const {
  std::string ids;
  if (voices_)
    for (const auto& v : voices_->list()) ids += (ids.empty() ? "" : ", ") + v.id;
  for (const auto& [alias, target] : options_.voice_aliases)
    ids += (ids.empty() ? "" : ", ") + alias + " (alias of " + target + ")";
  throw ApiError(404, "voice_not_found",
                 "voice '" + id + "' not found; available: " + (ids.empty() ? "none" : ids) +
                     (voices_ ? "" : " (no --voices directory)"),
                 param);
}

void SpeechServer::handle_speech(const httplib::Request& req, httplib::Response& res) {
  if (media_type(req) != "application/json") {
    throw ApiError(415, "unsupported_media_type", "the request body must be application/json");
  }
  SpeechPolicy policy{engine_.model_name(), options_.request_gamma, options_.gamma,
                      engine_.default_sampling()};
  SpeechFields f = parse_speech_request(req.body, policy);
  if (f.voice_id) {
    auto alias = options_.voice_aliases.find(*f.voice_id);
    if (alias != options_.voice_aliases.end()) f.voice_id = alias->second;
  }

  auto gen = std::make_shared<Generation>();
  gen->format = f.format;
  gen->stream = f.stream;
  gen->sample_rate = engine_.sample_rate();
  gen->speed = f.speed;
  gen->input_bytes = f.input.size();
  gen->connection =
      ConnectionWatch::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (f.voice_id) {
    if (!voices_) voice_not_found(*f.voice_id, "voice");
    try {
      gen->voice = voices_->get(*f.voice_id);
    } catch (const Error& e) {
      throw ApiError(400, "voice_unreadable", e.what(), "voice");
    }
    if (!gen->voice) voice_not_found(*f.voice_id, "voice");
    if (!gen->voice->codec_sha256.empty() && gen->voice->codec_sha256 != engine_.codec_sha256()) {
      throw ApiError(
          400, "voice_incompatible",
          "voice '" + *f.voice_id + "' was encoded with a different codec than the loaded one",
          "voice");
    }
  }
  std::vector<float> ref_pcm;
  if (f.ref_audio_base64) {
    auto bytes = base64_decode(*f.ref_audio_base64);
    if (!bytes)
      throw ApiError(400, "invalid_base64", "'ref_audio' is not valid base64", "ref_audio");
    try {
      ref_pcm = checked_reference_at_rate(*bytes, "'ref_audio'", engine_.sample_rate());
    } catch (const Error& e) {
      throw ApiError(400, "invalid_audio", e.what(), "ref_audio");
    }
  }

  uint64_t seed = f.seed ? *f.seed : random_seed();
  t_log.seed = seed;
  t_log.has_seed = true;
  gen->request.text = f.input;
  gen->request.seed = seed;
  gen->request.sampling = f.sampling;
  gen->request.gamma = f.gamma;
  gen->request.cfg = options_.cfg;
  gen->request.max_duration_s = f.max_duration_s;

  gen->lane = admission_.acquire();
  if (!gen->lane) {
    if (admission_.shutting_down())
      throw ApiError(503, "shutting_down", "the server is shutting down");
    throw ApiError(503, "busy", "the server is busy (queue full); retry later");
  }
  if (f.ref_audio_base64) {
    try {
      gen->voice = std::make_shared<const Voice>(engine_.make_voice(ref_pcm, f.ref_text));
    } catch (const UsageError& e) {
      throw ApiError(400, "invalid_audio", e.what(), "ref_audio");
    }
  }
  gen->request.voice = gen->voice.get();
  // What the engine would refuse (a prompt longer than its context, ...) is refused here, with
  // a 400, before a streamed reply's headers go out.
  engine_.check(gen->request);

  res.set_header("X-Drama-Seed", std::to_string(seed));
  res.set_header("X-Drama-Provenance", options_.provenance);
  const std::atomic<bool>* cancel = &admission_.cancel_flag();

  auto finish = [this](const SpeechResult& r, int64_t sample_rate) {
    double audio_s = double(r.samples) / double(sample_rate);
    double rtf = audio_s > 0 ? r.seconds_total / audio_s : 0;
    metrics_.record_generation(r.frames, r.seconds_to_first_audio, rtf, r.cancelled);
    t_log.frames = r.frames;
    t_log.seconds_to_first_audio = r.seconds_to_first_audio;
    t_log.real_time_factor = rtf;
    t_log.seconds_total = r.seconds_total;
    if (r.cancelled) t_log.outcome = "cancelled";
  };

  if (f.stream == StreamMode::None) {
    ReplyAudio audio(f.format, gen->sample_rate, f.speed, /*streamed=*/false);
    std::vector<uint8_t> body;
    SpeechResult r = engine_.speak(
        gen->request,
        [&](std::span<const float> frame) {
          audio.push(frame, body);
          return !gen->client_gone();
        },
        cancel);
    gen->lane.reset();
    finish(r, gen->sample_rate);
    if (r.cancelled && gen->client_gone()) {
      res.status = 499;  // client closed the request (nginx's code); nobody reads this reply
      return;
    }
    if (r.cancelled) throw ApiError(503, "shutting_down", "the server is shutting down");
    audio.finish(body);
    res.status = 200;
    res.set_header("X-Drama-Stop-Reason", speech_stop_name(r.stop));
    res.set_content(reinterpret_cast<const char*>(body.data()), body.size(),
                    audio_content_type(f.format));
    return;
  }

  // Streamed: the provider runs once on this worker thread, writing each frame as it is made.
  // A failed write (client gone) makes the sink return false, which stops the engine before
  // its next frame. Why generation stopped is known only at the end: the SSE done event says it,
  // and a client that sent `TE: trailers` gets it as the trailer X-Drama-Stop-Reason (chunked
  // framing written here, since httplib's own chunked writer has no trailers).
  bool sse = f.stream == StreamMode::Sse;
  bool trailer = accepts_trailers(req);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  auto provider = [this, gen, cancel, sse, trailer, finish](size_t, httplib::DataSink& sink) {
    auto write = [&](const std::string& bytes) {
      if (bytes.empty()) return true;
      if (!trailer) return sink.write(bytes.data(), bytes.size());
      char size[24];
      std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
      std::string chunk = size + bytes + "\r\n";
      return sink.write(chunk.data(), chunk.size());
    };
    auto emit = [&](const std::vector<uint8_t>& bytes) {
      if (gen->client_gone() || !sink.is_writable()) return false;
      if (bytes.empty()) return true;
      if (sse) {
        json ev = {{"type", "speech.audio.delta"}, {"audio", base64_encode(bytes)}};
        return write("data: " + ev.dump() + "\n\n");
      }
      return write(std::string(bytes.begin(), bytes.end()));
    };
    ReplyAudio audio(gen->format, gen->sample_rate, gen->speed, /*streamed=*/true);
    std::vector<uint8_t> pending;
    SpeechResult r;
    try {
      r = engine_.speak(
          gen->request,
          [&](std::span<const float> frame) {
            audio.push(frame, pending);
            bool ok = emit(pending);
            pending.clear();
            return ok;
          },
          cancel);
      if (!r.cancelled) audio.finish(pending);
    } catch (const std::exception& e) {
      gen->lane.reset();
      t_log.outcome = "error";
      log_warning(std::string("generation failed: ") + e.what());
      return false;  // headers are sent; closing the connection is the only signal left
    }
    gen->lane.reset();
    finish(r, gen->sample_rate);
    if (r.cancelled) return false;
    if (!emit(pending)) return false;
    if (sse) {
      int64_t in = int64_t(gen->input_bytes);
      json done = {
          {"type", "speech.audio.done"},
          {"usage",
           {{"input_tokens", in}, {"output_tokens", r.frames}, {"total_tokens", in + r.frames}}},
          {"frames", r.frames},
          {"samples", audio.samples_out()},
          {"stop_reason", speech_stop_name(r.stop)}};
      if (!write("data: " + done.dump() + "\n\n")) return false;
    }
    if (trailer) {
      std::string end =
          std::string("0\r\nX-Drama-Stop-Reason: ") + speech_stop_name(r.stop) + "\r\n\r\n";
      if (!sink.write(end.data(), end.size())) return false;
    }
    sink.done();
    return true;
  };
  const char* type = sse ? "text/event-stream" : audio_content_type(f.format);
  if (trailer) {
    res.set_header("Transfer-Encoding", "chunked");
    res.set_header("Trailer", "X-Drama-Stop-Reason");
    res.set_content_provider(type, provider, [gen](bool) { gen->lane.reset(); });
  } else {
    res.set_chunked_content_provider(type, provider, [gen](bool) { gen->lane.reset(); });
  }
}

void SpeechServer::handle_voices_list(const httplib::Request&, httplib::Response& res) {
  json list = json::array();
  if (voices_) {
    for (const auto& v : voices_->list()) list.push_back(voice_json(v));
  }
  send_json(res, 200, {{"voices", list}, {"aliases", options_.voice_aliases}});
}

void SpeechServer::handle_voice_add(const httplib::Request& req, httplib::Response& res) {
  if (!voices_ || !voices_->writable())
    throw ApiError(400, "voices_disabled", "this server has no --voices directory");
  std::string type = media_type(req);
  std::string name, ref_text, id;
  std::vector<uint8_t> audio;
  static const std::set<std::string> kFields = {"name", "ref_text", "id"};
  if (type == "multipart/form-data") {
    for (const auto& [key, part] : req.files) {
      if (key != "audio_sample" && !kFields.count(key)) {
        throw ApiError(400, "unknown_field", "unknown form field '" + key + "'", key);
      }
    }
    if (!req.has_file("audio_sample"))
      throw ApiError(400, "missing_field", "'audio_sample' is required", "audio_sample");
    const auto& a = req.get_file_value("audio_sample").content;
    audio.assign(a.begin(), a.end());
    name = req.has_file("name") ? req.get_file_value("name").content : "";
    ref_text = req.has_file("ref_text") ? req.get_file_value("ref_text").content : "";
    id = req.has_file("id") ? req.get_file_value("id").content : "";
  } else if (type == "application/json") {
    if (!utf8_length(req.body))
      throw ApiError(400, "invalid_utf8", "request body is not valid UTF-8");
    json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw ApiError(400, "invalid_json", "request body must be a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "audio_base64" && !kFields.count(it.key())) {
        throw ApiError(400, "unknown_field", "unknown field '" + it.key() + "'", it.key());
      }
      if (!it->is_string())
        throw ApiError(400, "invalid_type", "'" + it.key() + "' must be a string", it.key());
    }
    name = j.value("name", "");
    ref_text = j.value("ref_text", "");
    id = j.value("id", "");
    if (!j.contains("audio_base64"))
      throw ApiError(400, "missing_field", "'audio_base64' is required", "audio_base64");
    auto bytes = base64_decode(j["audio_base64"].get<std::string>());
    if (!bytes)
      throw ApiError(400, "invalid_base64", "'audio_base64' is not valid base64", "audio_base64");
    audio = std::move(*bytes);
  } else {
    throw ApiError(415, "unsupported_media_type",
                   "the request body must be multipart/form-data or application/json");
  }
  auto name_len = utf8_length(name);
  if (!name_len || *name_len == 0 || *name_len > 256)
    throw ApiError(400, "invalid_value", "'name' must be 1 to 256 characters of UTF-8", "name");
  auto text_len = utf8_length(ref_text);
  if (!text_len || *text_len == 0 || *text_len > kMaxInputCharacters)
    throw ApiError(400, "invalid_value", "'ref_text' must be 1 to 4096 characters of UTF-8",
                   "ref_text");
  if (!id.empty() && !is_valid_voice_id(id))
    throw ApiError(400, "invalid_voice_id", "'id' must be 1 to 64 characters from [A-Za-z0-9_-]",
                   "id");
  if (!id.empty() && voices_->is_built_in(id))
    throw ApiError(400, "voice_exists",
                   "'" + id + "' is the id of a built-in voice of the loaded checkpoint", "id");
  if (!id.empty() && voices_->info(id))
    throw ApiError(400, "voice_exists", "a voice with id '" + id + "' already exists", "id");

  std::vector<float> pcm;
  try {
    pcm = checked_reference_at_rate({reinterpret_cast<const uint8_t*>(audio.data()), audio.size()},
                                    "'audio_sample'", engine_.sample_rate());
  } catch (const Error& e) {
    throw ApiError(400, "invalid_audio", e.what(), "audio_sample");
  }
  auto lane = admission_.acquire();
  if (!lane) throw ApiError(503, "busy", "the server is busy (queue full); retry later");
  Voice voice;
  try {
    voice = engine_.make_voice(pcm, ref_text);
  } catch (const UsageError& e) {
    throw ApiError(400, "invalid_audio", e.what(), "audio_sample");
  }
  lane.reset();
  if (id.empty()) id = voices_->id_for_name(name);
  VoiceInfo info = voices_->add(id, name, voice);
  send_json(res, 200, voice_json(info));
}

void SpeechServer::handle_voice_delete(const httplib::Request& req, httplib::Response& res) {
  std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : "";
  if (!is_valid_voice_id(id))
    throw ApiError(400, "invalid_voice_id",
                   "voice id must be 1 to 64 characters from [A-Za-z0-9_-]", "id");
  if (!voices_ || !voices_->remove(id))
    throw ApiError(404, "voice_not_found", "voice '" + id + "' not found", "id");
  send_json(res, 200, {{"id", id}, {"object", "voice"}, {"deleted", true}});
}

void SpeechServer::handle_models(const httplib::Request&, httplib::Response& res) {
  json model = {{"id", engine_.model_name()},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "drama"},
                {"provenance", options_.provenance},
                {"sample_rate", engine_.sample_rate()},
                {"frame_rate", engine_.frame_rate()}};
  json data = json::array({model});
  // OpenAI's names for the same loaded model, so clients that list models find theirs.
  for (const char* alias : kOpenAiModelAliases) {
    json a = model;
    a["id"] = alias;
    a["alias_of"] = engine_.model_name();
    data.push_back(a);
  }
  send_json(res, 200, {{"object", "list"}, {"data", data}});
}

void SpeechServer::handle_health(const httplib::Request&, httplib::Response& res) {
  send_json(res, 200,
            {{"status", admission_.shutting_down() ? "stopping" : "ok"},
             {"model", engine_.model_name()},
             {"provenance", options_.provenance},
             {"backend", engine_.backend_name()},
             {"cfg", options_.cfg == CfgMode::Paired ? "paired" : "separate"},
             {"gamma", options_.gamma},
             {"request_gamma", options_.request_gamma},
             {"busy", admission_.busy()},
             {"lanes", admission_.lanes()},
             {"lanes_in_use", admission_.running()},
             {"queue_depth", admission_.queue_depth()},
             {"api_key_required", options_.api_key.has_value()}});
}

void SpeechServer::handle_metrics(const httplib::Request&, httplib::Response& res) {
  Metrics::Gauges g;
  g.queue_depth = admission_.queue_depth();
  g.lanes = admission_.lanes();
  g.lanes_in_use = admission_.running();
  g.engine = engine_.stats();
  res.set_content(metrics_.render(g), "text/plain; version=0.0.4");
}

}  // namespace drama::server
