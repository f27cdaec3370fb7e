// The HTTP layer in process, against a deterministic fake engine: every route, status and error
// shape, streaming, admission, cancellation, voices, hostile clients and shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "audio/audio_io.h"
#include "server/base64.h"
#include "server/connection_watch.h"
#include "server/http_test_util.h"
#include "server/in_process_server.h"
#include "util/error.h"

namespace drama::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using server::ServerOptions;
using server::SpeechServer;

fs::path temp_dir(const std::string& name) {
  return fresh_temp_dir("server-fake", name);
}

using Running = InProcessServer;

ServerOptions options(const std::string& name, int max_queue = 2) {
  ServerOptions o;
  o.port = 0;
  o.voices_dir = temp_dir(name);
  o.max_queue = max_queue;
  o.read_timeout_s = 1;
  o.write_timeout_s = 2;
  o.max_body_bytes = 1 << 20;
  return o;
}

void expect_error_shape(const Reply& r, int status, const std::string& code) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = r.json();
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty());
  EXPECT_EQ(e["type"], status >= 500 ? "server_error" : "invalid_request_error");
  EXPECT_TRUE(e.contains("param"));
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code) << r.body;
  }
}

std::string tone_wav(double seconds, int rate = 16000) {
  std::vector<float> pcm(size_t(seconds * rate));
  for (size_t i = 0; i < pcm.size(); ++i) pcm[i] = float(0.3 * std::sin(0.03 * double(i)));
  const std::vector<uint8_t> wav = encode_audio(pcm, rate, AudioFormat::Wav);
  return {wav.begin(), wav.end()};
}

TEST(HttpFake, HealthModelsAndMetrics) {
  Running s(options("health"));
  Reply h = get(s.port, "/health");
  ASSERT_EQ(h.status, 200);
  json j = h.json();
  for (const char* k :
       {"status", "model", "provenance", "backend", "cfg", "gamma", "request_gamma", "busy"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["model"], "fake-drama");
  EXPECT_EQ(j["provenance"], "override:fake");
  EXPECT_EQ(j["cfg"], "paired");
  EXPECT_EQ(j["request_gamma"], false);
  Reply m = get(s.port, "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.json()["data"][0]["id"], "fake-drama");
  EXPECT_EQ(m.json()["data"][0]["provenance"], "override:fake");
  post(s.port, "/v1/audio/speech", R"({"input": "metrics please", "seed": 3})");
  Reply p = get(s.port, "/metrics");
  ASSERT_EQ(p.status, 200);
  for (const char* k : {"drama_requests_total{outcome=\"ok\"}", "drama_frames_generated_total",
                        "drama_time_to_first_audio_seconds_count", "drama_real_time_factor_sum",
                        "drama_queue_depth", "drama_cancellations_total"}) {
    EXPECT_NE(p.body.find(k), std::string::npos) << k;
  }
}

TEST(HttpFake, WholeRepliesAreRepeatableInEveryFormat) {
  Running s(options("formats"));
  Reply a = post(s.port, "/v1/audio/speech", R"({"input": "hello there", "seed": 42})");
  Reply b = post(s.port, "/v1/audio/speech", R"({"input": "hello there", "seed": 42})");
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.header("Content-Type"), "audio/wav");
  EXPECT_EQ(a.header("X-Drama-Seed"), "42");
  EXPECT_EQ(a.header("X-Drama-Provenance"), "override:fake");
  EXPECT_EQ(a.body, b.body);
  std::string data = wav_data(a.body);
  ASSERT_FALSE(data.empty());
  EXPECT_EQ(le32(a.body, 40), data.size());
  EXPECT_EQ(le32(a.body, 4), data.size() + 36);
  EXPECT_EQ(data.size() % (2 * FakeEngine::kSamplesPerFrame), 0u);
  EXPECT_GT(mean_abs_s16(data), 100);
  Reply pcm = post(s.port, "/v1/audio/speech",
                   R"({"input": "hello there", "seed": 42, "response_format": "pcm"})");
  EXPECT_EQ(pcm.header("Content-Type"), "audio/pcm");
  EXPECT_EQ(pcm.body, data);
  Reply flac = post(s.port, "/v1/audio/speech",
                    R"({"input": "hello there", "seed": 42, "response_format": "flac"})");
  EXPECT_EQ(flac.header("Content-Type"), "audio/flac");
  EXPECT_EQ(flac.body.substr(0, 4), "fLaC");
  Reply other = post(s.port, "/v1/audio/speech", R"({"input": "hello there", "seed": 43})");
  EXPECT_NE(other.body, a.body);
}

TEST(HttpFake, RandomSeedIsEchoedAndReproduces) {
  Running s(options("seed"));
  Reply a = post(s.port, "/v1/audio/speech", R"({"input": "seedless"})");
  ASSERT_EQ(a.status, 200);
  std::string seed = a.header("X-Drama-Seed");
  ASSERT_FALSE(seed.empty());
  Reply b = post(s.port, "/v1/audio/speech", R"({"input": "seedless", "seed": )" + seed + "}");
  EXPECT_EQ(a.body, b.body);
}

TEST(HttpFake, StreamedAudioAndSseCarryTheSameSamples) {
  Running s(options("stream"));
  Reply whole = post(s.port, "/v1/audio/speech", R"({"input": "stream me", "seed": 7})");
  Reply streamed =
      post(s.port, "/v1/audio/speech", R"({"input": "stream me", "seed": 7, "stream": true})");
  ASSERT_EQ(streamed.status, 200);
  EXPECT_EQ(streamed.header("Transfer-Encoding"), "chunked");
  EXPECT_EQ(streamed.header("X-Drama-Seed"), "7");
  EXPECT_EQ(le32(streamed.body, 4), 0xFFFFFFFFu);
  EXPECT_EQ(le32(streamed.body, 40), 0xFFFFFFFFu);
  EXPECT_EQ(wav_data(streamed.body), wav_data(whole.body));
  Reply pcm = post(
      s.port, "/v1/audio/speech",
      R"({"input": "stream me", "seed": 7, "stream_format": "audio", "response_format": "pcm"})");
  EXPECT_EQ(pcm.body, wav_data(whole.body));

  Reply sse = post(
      s.port, "/v1/audio/speech",
      R"({"input": "stream me", "seed": 7, "stream_format": "sse", "response_format": "pcm"})");
  ASSERT_EQ(sse.status, 200);
  EXPECT_EQ(sse.header("Content-Type"), "text/event-stream");
  auto events = sse_events(sse.body);
  ASSERT_GE(events.size(), 2u);
  std::string joined;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i]["type"], "speech.audio.delta");
    auto bytes = server::base64_decode(events[i]["audio"].get<std::string>());
    ASSERT_TRUE(bytes);
    joined.append(bytes->begin(), bytes->end());
  }
  EXPECT_EQ(joined, wav_data(whole.body));
  EXPECT_EQ(events.back()["type"], "speech.audio.done");
  EXPECT_GT(events.back()["usage"]["output_tokens"].get<int>(), 0);
}

TEST(HttpFake, RefusalsHaveTheRightStatusAndShape) {
  Running s(options("refusals"));
  expect_error_shape(post(s.port, "/v1/audio/speech", "{nope"), 400, "invalid_json");
  expect_error_shape(post(s.port, "/v1/audio/speech", R"({"input": "x", "extra": 1})"), 400,
                     "unknown_field");
  expect_error_shape(post(s.port, "/v1/audio/speech", "{\"input\": \"\xff\"}"), 400,
                     "invalid_utf8");
  expect_error_shape(post(s.port, "/v1/audio/speech", R"({"input": ""})"), 400, "empty_input");
  expect_error_shape(
      post(s.port, "/v1/audio/speech", R"({"input": "x", "response_format": "aac"})"), 400,
      "unsupported_format");
  expect_error_shape(post(s.port, "/v1/audio/speech", R"({"input": "x", "cfg_scale": 3})"), 400,
                     "guidance_not_allowed");
  expect_error_shape(post(s.port, "/v1/audio/speech", R"({"input": "x", "voice": "../../etc"})"),
                     400, "invalid_voice_id");
  expect_error_shape(post(s.port, "/v1/audio/speech", R"({"input": "x", "voice": "nobody"})"), 404,
                     "voice_not_found");
  expect_error_shape(post(s.port, "/v1/audio/speech", R"({"input": "x"})", "text/plain"), 415,
                     "unsupported_media_type");
  expect_error_shape(post(s.port, "/v1/audio/speech", std::string(2 << 20, 'a')), 413,
                     "payload_too_large");
  expect_error_shape(get(s.port, "/v1/nothing"), 404, "route_not_found");
  Reply r405 = get(s.port, "/v1/audio/speech");
  expect_error_shape(r405, 405, "method_not_allowed");
  EXPECT_EQ(r405.header("Allow"), "POST");
  expect_error_shape(get(s.port, "/health", "PUT"), 405, "method_not_allowed");
  expect_error_shape(get(s.port, "/v1/audio/voices/a.b", "DELETE"), 400, "invalid_voice_id");
  expect_error_shape(get(s.port, "/v1/audio/voices/..%2F..%2Fetc", "DELETE"), 404, "");
  expect_error_shape(get(s.port, "/v1/audio/voices/ghost", "DELETE"), 404, "voice_not_found");
  EXPECT_EQ(s.engine.speak_calls.load(), 0);
  EXPECT_EQ(get(s.port, "/health").status, 200);
}

TEST(HttpFake, VoicesAddUseListDeleteAndSurviveRestart) {
  ServerOptions o = options("voices");
  std::string wav = tone_wav(1.0);
  std::string id;
  {
    Running s(o);
    // Multipart.
    httplib::Client cli("127.0.0.1", s.port);
    httplib::MultipartFormDataItems items = {{"audio_sample", wav, "ref.wav", "audio/wav"},
                                             {"name", "Alice Smith", "", ""},
                                             {"ref_text", "The reference words.", "", ""}};
    auto res = cli.Post("/v1/audio/voices", items);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    json v = json::parse(res->body);
    id = v["id"];
    EXPECT_EQ(id, "Alice-Smith");
    EXPECT_EQ(v["name"], "Alice Smith");
    EXPECT_EQ(v["transcript"], "The reference words.");
    EXPECT_GT(v["frames"].get<int>(), 0);
    // JSON, with an explicit id.
    json body = {{"name", "Bob"},
                 {"ref_text", "Other words."},
                 {"id", "bob_1"},
                 {"audio_base64", server::base64_encode(
                                      {reinterpret_cast<const uint8_t*>(wav.data()), wav.size()})}};
    Reply b = post(s.port, "/v1/audio/voices", body.dump());
    ASSERT_EQ(b.status, 200) << b.body;
    expect_error_shape(post(s.port, "/v1/audio/voices", body.dump()), 400, "voice_exists");
    body["id"] = "../evil";
    expect_error_shape(post(s.port, "/v1/audio/voices", body.dump()), 400, "invalid_voice_id");
    body["id"] = "x";
    body["audio_base64"] =
        server::base64_encode(std::vector<uint8_t>{'n', 'o', 't', 'a', 'w', 'a', 'v'});
    expect_error_shape(post(s.port, "/v1/audio/voices", body.dump()), 400, "invalid_audio");
    // Uploads go through src/audio's reader: a FLAC header declaring 2^31 samples (found by
    // fuzz_audio) and a non-WAV/FLAC container are refused; the server stays healthy.
    const std::string bomb =
        "ZkxhQwAAACIQABAAAADfAADfBdwA8GVmZXJlbmNlIGxpYkZMMjAyMigAAAAAAAAA//h3"
        "CACEhCEg/9BKKeQhh4hpVWAoAAAAAAAAAFQ=";
    body["audio_base64"] = bomb;
    expect_error_shape(post(s.port, "/v1/audio/voices", body.dump()), 400, "invalid_audio");
    body["audio_base64"] = server::base64_encode(
        std::vector<uint8_t>{'I', 'D', '3', 3, 0, 0, 0, 0, 0, 0, 0xff, 0xfb, 0x90});
    expect_error_shape(post(s.port, "/v1/audio/voices", body.dump()), 400, "invalid_audio");
    expect_error_shape(post(s.port, "/v1/audio/speech",
                            json{{"input", "x"}, {"ref_audio", bomb}, {"ref_text", "t"}}.dump()),
                       400, "invalid_audio");
    expect_error_shape(post(s.port, "/v1/audio/voices", "x", "text/plain"), 415,
                       "unsupported_media_type");
    expect_error_shape(
        post(s.port, "/v1/audio/voices",
             R"({"name": "n", "ref_text": "t", "audio_base64": "AAAA", "sneaky": "1"})"),
        400, "unknown_field");

    Reply a1 = post(s.port, "/v1/audio/speech",
                    R"({"input": "switch", "seed": 5, "voice": ")" + id + "\"}");
    Reply b1 = post(s.port, "/v1/audio/speech",
                    R"({"input": "switch", "seed": 5, "voice": {"id": "bob_1"}})");
    Reply a2 = post(s.port, "/v1/audio/speech",
                    R"({"input": "switch", "seed": 5, "voice": ")" + id + "\"}");
    ASSERT_EQ(a1.status, 200) << a1.body;
    EXPECT_EQ(a1.body, a2.body);
    EXPECT_NE(a1.body, b1.body);
    Reply list = get(s.port, "/v1/audio/voices");
    ASSERT_EQ(list.json()["voices"].size(), 2u);
    EXPECT_EQ(get(s.port, "/v1/audio/voices/bob_1", "DELETE").status, 200);
    expect_error_shape(post(s.port, "/v1/audio/speech", R"({"input": "x", "voice": "bob_1"})"), 404,
                       "voice_not_found");
  }
  for (const auto& e : fs::directory_iterator(o.voices_dir)) {
    EXPECT_TRUE(e.path().extension() == ".voice" || e.path().extension() == ".json") << e.path();
  }
  Running again(o);
  json list = get(again.port, "/v1/audio/voices").json();
  ASSERT_EQ(list["voices"].size(), 1u);
  EXPECT_EQ(list["voices"][0]["id"], id);
  EXPECT_EQ(list["voices"][0]["name"], "Alice Smith");
}

// Built-in voices (the checkpoint's voices/, format/builtin_voices.h) beside stored ones: listed
// first with "built_in": true, usable by id and through an alias, never deleted (403, nothing
// changes), their ids never given to a stored voice; a voices directory that already holds one
// of their ids is refused at start; with no voices directory they still serve.
TEST(HttpFake, BuiltInVoicesAreListedUsableAndNeverDeleted) {
  FakeEngine maker;
  std::vector<float> pcm(24000);
  for (size_t i = 0; i < pcm.size(); ++i) pcm[i] = float(0.3 * std::sin(0.02 * double(i)));
  auto builtin = std::make_shared<const Voice>(maker.make_voice(pcm, "Built-in words."));
  ServerOptions o = options("builtin");
  o.builtin_voices = {BuiltinVoice{"zed", "Zed (corpus)", 7, builtin}};
  o.voice_aliases = {{"alloy", "zed"}};
  const std::string wav = tone_wav(1.0);
  auto upload = [&](int port, const std::string& name, const std::string& id) {
    json body = {{"name", name},
                 {"ref_text", "Other words."},
                 {"audio_base64", server::base64_encode(
                                      {reinterpret_cast<const uint8_t*>(wav.data()), wav.size()})}};
    if (!id.empty()) body["id"] = id;
    return post(port, "/v1/audio/voices", body.dump());
  };
  const std::string speech = R"({"input": "built in", "seed": 9, "voice": "zed"})";
  std::string first;
  {
    Running s(o);
    ASSERT_EQ(upload(s.port, "Amy", "amy").status, 200);
    json list = get(s.port, "/v1/audio/voices").json();
    ASSERT_EQ(list["voices"].size(), 2u) << list.dump();
    EXPECT_EQ(list["voices"][0], (json{{"id", "zed"},
                                       {"name", "Zed (corpus)"},
                                       {"transcript", "Built-in words."},
                                       {"frames", builtin->frames},
                                       {"created", 7},
                                       {"built_in", true}}));
    EXPECT_EQ(list["voices"][1]["id"], "amy");
    EXPECT_EQ(list["voices"][1]["built_in"], false);

    Reply a = post(s.port, "/v1/audio/speech", speech);
    ASSERT_EQ(a.status, 200) << a.body;
    first = a.body;
    Reply plain = post(s.port, "/v1/audio/speech", R"({"input": "built in", "seed": 9})");
    EXPECT_NE(plain.body, first);  // the voice is used
    Reply alias =
        post(s.port, "/v1/audio/speech", R"({"input": "built in", "seed": 9, "voice": "alloy"})");
    EXPECT_EQ(alias.body, first);

    // DELETE of a built-in voice: 403, and it is still there and usable.
    Reply d = get(s.port, "/v1/audio/voices/zed", "DELETE");
    expect_error_shape(d, 403, "voice_built_in");
    EXPECT_NE(d.json()["error"]["message"].get<std::string>().find("built into"),
              std::string::npos);
    EXPECT_EQ(get(s.port, "/v1/audio/voices").json()["voices"].size(), 2u);
    EXPECT_EQ(post(s.port, "/v1/audio/speech", speech).body, first);
    // Its id is taken: explicitly (400 voice_exists), and a name that would become it gets
    // another id.
    expect_error_shape(upload(s.port, "Zed again", "zed"), 400, "voice_exists");
    EXPECT_FALSE(fs::exists(o.voices_dir / "zed.voice"));
    Reply named = upload(s.port, "zed", "");
    ASSERT_EQ(named.status, 200) << named.body;
    EXPECT_EQ(named.json()["id"], "zed-2");
    EXPECT_EQ(named.json()["built_in"], false);
    EXPECT_EQ(get(s.port, "/v1/audio/voices/zed-2", "DELETE").status, 200);
    EXPECT_EQ(get(s.port, "/v1/audio/voices/amy", "DELETE").status, 200);
    std::string metrics = get(s.port, "/metrics").body;
    EXPECT_NE(metrics.find("drama_requests_total{outcome=\"forbidden\"} 1"), std::string::npos)
        << metrics;
  }
  // A stored voice under a built-in id (written before the checkpoint had it) is refused at
  // start: one of the two would be unreachable.
  write_voice(o.voices_dir / "zed.voice", *builtin);
  try {
    Running clash(o);
    ADD_FAILURE() << "a stored voice with a built-in id was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("also a built-in voice"), std::string::npos) << e.what();
  }
  fs::remove(o.voices_dir / "zed.voice");
  // No voices directory: built-in voices still serve; nothing can be added.
  o.voices_dir.clear();
  Running bare(o);
  json list = get(bare.port, "/v1/audio/voices").json();
  ASSERT_EQ(list["voices"].size(), 1u);
  EXPECT_EQ(post(bare.port, "/v1/audio/speech", speech).body, first);
  expect_error_shape(upload(bare.port, "Amy", "amy"), 400, "voices_disabled");
  expect_error_shape(get(bare.port, "/v1/audio/voices/zed", "DELETE"), 403, "voice_built_in");
  expect_error_shape(get(bare.port, "/v1/audio/voices/amy", "DELETE"), 404, "voice_not_found");
}

TEST(HttpFake, OneOffReferenceAudio) {
  Running s(options("ref"));
  std::string wav = tone_wav(1.5, 48000);  // the voice writer's rule: 1 to 60 s
  std::string b64 =
      server::base64_encode({reinterpret_cast<const uint8_t*>(wav.data()), wav.size()});
  json body = {
      {"input", "with a reference"}, {"seed", 9}, {"ref_audio", b64}, {"ref_text", "ref words"}};
  Reply a = post(s.port, "/v1/audio/speech", body.dump());
  Reply b = post(s.port, "/v1/audio/speech", body.dump());
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.body, b.body);
  body["ref_audio"] = "%%%";
  expect_error_shape(post(s.port, "/v1/audio/speech", body.dump()), 400, "invalid_base64");
}

TEST(HttpFake, QueueFullIsRefusedBusyWithRetryAfter) {
  Running s(options("busy", /*max_queue=*/1));
  s.engine.frame_delay_ms = 150;
  std::thread first(
      [&] { post(s.port, "/v1/audio/speech", R"({"input": "long one", "seed": 1})"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  std::thread second(
      [&] { post(s.port, "/v1/audio/speech", R"({"input": "waiting", "seed": 1})"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(get(s.port, "/health").json()["busy"], true);
  Reply third = post(s.port, "/v1/audio/speech", R"({"input": "refused", "seed": 1})");
  expect_error_shape(third, 503, "busy");
  EXPECT_EQ(third.header("Retry-After"), "1");
  first.join();
  second.join();
  EXPECT_EQ(s.engine.speak_calls.load(), 2);
  EXPECT_NE(get(s.port, "/metrics").body.find("drama_requests_total{outcome=\"busy\"} 1"),
            std::string::npos);
}

TEST(HttpFake, ClientThatHangsUpStopsGenerationWithinAFrame) {
  Running s(options("cancel"));
  std::string req =
      R"({"input": "a rather long utterance to cancel", "seed": 11, "stream": true, "response_format": "pcm"})";
  Reply expected = post(s.port, "/v1/audio/speech", req);
  ASSERT_EQ(expected.status, 200);
  int64_t total_frames = int64_t(expected.body.size() / (2 * FakeEngine::kSamplesPerFrame));
  ASSERT_GE(total_frames, 4);
  s.engine.frame_delay_ms = 200;
  int64_t before = s.engine.frames_generated;
  post(s.port, "/v1/audio/speech", req, "application/json",
       [](const std::string& so_far) { return so_far.size() < 2 * FakeEngine::kSamplesPerFrame; });
  // The engine notices on the frame after the hang-up at the latest.
  for (int i = 0; i < 50 && s.engine.cancelled_calls == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(s.engine.cancelled_calls.load(), 1);
  EXPECT_LE(s.engine.frames_generated - before, 2);  // the frame sent, then at most one more
  s.engine.frame_delay_ms = 0;
  Reply after = post(s.port, "/v1/audio/speech", req);
  EXPECT_EQ(after.body, expected.body);
  EXPECT_NE(get(s.port, "/metrics").body.find("drama_cancellations_total 1"), std::string::npos);
}

TEST(ConnectionWatch, FindsTheSocketByItsEndpointsAndSeesTheHangUp) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  int port = ntohs(addr.sin_port);
  auto client = std::make_unique<RawSocket>(port);
  ASSERT_TRUE(client->ok());
  int conn = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  sockaddr_in peer{};
  len = sizeof peer;
  ASSERT_EQ(::getpeername(conn, reinterpret_cast<sockaddr*>(&peer), &len), 0);
  int peer_port = ntohs(peer.sin_port);

  auto watch = ConnectionWatch::find("127.0.0.1", port, "127.0.0.1", peer_port);
  ASSERT_TRUE(watch.has_value());
  EXPECT_EQ(watch->fd(), conn);
  EXPECT_FALSE(watch->peer_closed());
  client->send("pipelined bytes are not a hang-up");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(watch->peer_closed());
  client.reset();
  bool closed = false;
  for (int i = 0; i < 100 && !(closed = watch->peer_closed()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(closed);
  EXPECT_FALSE(ConnectionWatch::find("127.0.0.1", port, "127.0.0.1", peer_port + 1).has_value());
  EXPECT_FALSE(ConnectionWatch::find("127.0.0.1", -1, "127.0.0.1", -1).has_value());
  ::close(conn);
  ::close(listener);
}

TEST(HttpFake, ClientThatHangsUpOnAWholeReplyStopsGenerationWithinAFrame) {
  // A whole (non-streamed) reply writes nothing until the end, so no failed write can reveal
  // the hang-up: the server must watch the connection itself.
  Running s(options("cancel-whole"));
  std::string body = R"({"input": "a rather long utterance to cancel", "seed": 11})";
  Reply expected = post(s.port, "/v1/audio/speech", body);
  ASSERT_EQ(expected.status, 200);
  int64_t total_frames = s.engine.frames_generated;
  ASSERT_GE(total_frames, 4);
  s.engine.frame_delay_ms = 200;
  int64_t before = s.engine.frames_generated;
  {
    RawSocket client(s.port);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE(
        client.send("POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: "
                    "application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body));
    for (int i = 0; i < 100 && s.engine.frames_generated == before; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }  // hang up during the first frames
  int64_t at_hangup = s.engine.frames_generated;
  for (int i = 0; i < 50 && s.engine.cancelled_calls == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(s.engine.cancelled_calls.load(), 1);
  EXPECT_LE(s.engine.frames_generated - at_hangup, 1);
  EXPECT_LT(s.engine.frames_generated - before, total_frames);
  s.engine.frame_delay_ms = 0;
  Reply after = post(s.port, "/v1/audio/speech", body);
  EXPECT_EQ(after.body, expected.body);
  EXPECT_NE(get(s.port, "/metrics").body.find("drama_cancellations_total 1"), std::string::npos);
}

TEST(HttpFake, StalledAndHostileClientsAreDroppedAndTheServerStaysHealthy) {
  Running s(options("hostile"));
  {
    RawSocket stall(s.port);
    ASSERT_TRUE(stall.ok());
    stall.send("POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n");
    auto t0 = std::chrono::steady_clock::now();
    bool closed = false;
    stall.read_all(10, &closed);
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(closed);
    EXPECT_LT(waited, 5.0);  // read timeout is 1 s
  }
  {
    RawSocket body_stall(s.port);
    body_stall.send(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/json\r\nContent-Length: 100\r\n\r\n{\"in");
    bool closed = false;
    body_stall.read_all(10, &closed);
    EXPECT_TRUE(closed);
  }
  {
    RawSocket garbage(s.port);
    garbage.send("\x16\x03\x01 not http at all\r\n\r\n");
    std::string reply = garbage.read_all(5);
    EXPECT_TRUE(reply.empty() || reply.rfind("HTTP/1.1 400", 0) == 0) << reply;
  }
  {
    RawSocket huge(s.port);
    huge.send(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/json\r\nContent-Length: 99999999\r\n\r\n");
    std::string reply = huge.read_all(5);
    EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
  }
  EXPECT_EQ(get(s.port, "/health").status, 200);
  EXPECT_EQ(post(s.port, "/v1/audio/speech", R"({"input": "still fine", "seed": 1})").status, 200);
}

TEST(HttpFake, StopCancelsTheRunningStreamPromptly) {
  auto s = std::make_unique<Running>(options("stop"));
  s->engine.frame_delay_ms = 300;
  std::thread client([&] {
    post(s->port, "/v1/audio/speech",
         R"({"input": "interrupted by shutdown", "seed": 2, "stream": true})");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto t0 = std::chrono::steady_clock::now();
  s.reset();  // stop() + join
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  client.join();
  EXPECT_LT(took, 3.0);
}

}  // namespace
}  // namespace drama::testing
