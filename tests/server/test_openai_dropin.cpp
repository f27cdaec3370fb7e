// Issue 15 over HTTP, in process against the fake engine: OpenAI model names, voice aliases,
// MP3 and Opus (whole, streamed, SSE: the same bytes), speed, API keys on every /v1/* route,
// the stop reason (header, SSE field, trailer), the shared reference limits and port sharing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "audio/audio_io.h"
#include "server/auth.h"
#include "server/base64.h"
#include "server/http_test_util.h"
#include "server/in_process_server.h"
#include "support/decode_output.h"
#include "util/request_rules.h"

namespace drama::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using server::ServerOptions;
using server::SpeechServer;

fs::path temp_dir(const std::string& name) {
  return fresh_temp_dir("server-dropin", name);
}

using Running = InProcessServer;

ServerOptions options(const std::string& name) {
  ServerOptions o;
  o.port = 0;
  o.voices_dir = temp_dir(name);
  o.max_queue = 2;
  o.read_timeout_s = 2;
  o.write_timeout_s = 2;
  o.max_body_bytes = 4 << 20;
  return o;
}

std::string tone_wav(double seconds, int rate = 16000) {
  std::vector<float> pcm(size_t(seconds * rate));
  for (size_t i = 0; i < pcm.size(); ++i) pcm[i] = float(0.3 * std::sin(0.03 * double(i)));
  const std::vector<uint8_t> wav = encode_audio(pcm, rate, AudioFormat::Wav);
  return {wav.begin(), wav.end()};
}

std::string sse_audio(const std::string& body) {
  std::string out;
  for (const auto& ev : sse_events(body)) {
    if (ev.value("type", "") != "speech.audio.delta") continue;
    auto b = server::base64_decode(ev["audio"].get<std::string>());
    if (b) out.append(b->begin(), b->end());
  }
  return out;
}

std::string speech(const std::string& extra) {
  return R"({"input": "drop-in test", "seed": 7)" + extra + "}";
}

TEST(OpenAiDropIn, ModelAliasesAreTheLoadedModelAndAreListed) {
  Running s(options("models"));
  for (const char* m : {"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "fake-drama"}) {
    Reply r = post(s.port, "/v1/audio/speech", speech(std::string(R"(, "model": ")") + m + "\""));
    EXPECT_EQ(r.status, 200) << m << ": " << r.body;
  }
  EXPECT_EQ(post(s.port, "/v1/audio/speech", speech(R"(, "model": "tts-2")")).status, 400);
  json models = get(s.port, "/v1/models").json();
  std::set<std::string> ids;
  for (const auto& m : models["data"]) ids.insert(m["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{"fake-drama", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"}));
  EXPECT_EQ(models["data"][1]["alias_of"], "fake-drama");
}

TEST(OpenAiDropIn, VoiceAliasesAndUnknownVoicesListTheIds) {
  ServerOptions o = options("alias");
  o.voice_aliases = {{"alloy", "ref_a"}};
  Running s(o);
  // Before the voice exists, the alias' target is unknown; the 404 lists what there is.
  Reply missing = post(s.port, "/v1/audio/speech", speech(R"(, "voice": "alloy")"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find("alloy (alias of ref_a)"), std::string::npos) << missing.body;
  httplib::Client cli("127.0.0.1", s.port);
  auto added = cli.Post("/v1/audio/voices", httplib::MultipartFormDataItems{
                                                {"audio_sample", tone_wav(2.0), "r.wav", ""},
                                                {"name", "Ref A", "", ""},
                                                {"id", "ref_a", "", ""},
                                                {"ref_text", "a reference", "", ""}});
  ASSERT_TRUE(added && added->status == 200) << (added ? added->body : "no reply");
  Reply by_alias = post(s.port, "/v1/audio/speech", speech(R"(, "voice": "alloy")"));
  Reply by_id = post(s.port, "/v1/audio/speech", speech(R"(, "voice": "ref_a")"));
  ASSERT_EQ(by_alias.status, 200) << by_alias.body;
  EXPECT_EQ(by_alias.body, by_id.body);
  Reply nobody = post(s.port, "/v1/audio/speech", speech(R"(, "voice": "nobody")"));
  EXPECT_EQ(nobody.status, 404);
  EXPECT_NE(nobody.body.find("available: ref_a, alloy (alias of ref_a)"), std::string::npos)
      << nobody.body;
  EXPECT_EQ(get(s.port, "/v1/audio/voices").json()["aliases"]["alloy"], "ref_a");
}

TEST(OpenAiDropIn, Mp3AndOpusWholeStreamedAndSseAreTheSameBytes) {
  Running s(options("formats"));
  for (const char* f : {"mp3", "opus"}) {
    const std::string fmt = std::string(R"(, "response_format": ")") + f + "\"";
    Reply whole = post(s.port, "/v1/audio/speech", speech(fmt));
    ASSERT_EQ(whole.status, 200) << whole.body;
    EXPECT_EQ(whole.header("Content-Type"), std::string(f) == "mp3" ? "audio/mpeg" : "audio/ogg");
    EXPECT_EQ(whole.body, post(s.port, "/v1/audio/speech", speech(fmt)).body) << "repeat";
    Reply streamed =
        post(s.port, "/v1/audio/speech", speech(fmt + R"(, "stream_format": "audio")"));
    Reply sse = post(s.port, "/v1/audio/speech", speech(fmt + R"(, "stream_format": "sse")"));
    EXPECT_EQ(streamed.body, whole.body) << f;
    EXPECT_EQ(sse_audio(sse.body), whole.body) << f;
    const DecodedAudio d = decode_output(whole.body);
    Reply pcm = post(s.port, "/v1/audio/speech", speech(R"(, "response_format": "pcm")"));
    const double seconds = double(pcm.body.size() / 2) / 24000.0;
    EXPECT_NEAR(d.seconds(), seconds, 0.1) << f;
  }
}

TEST(OpenAiDropIn, SpeedStretchesRepeatablyAndOneLeavesTheBytes) {
  Running s(options("speed"));
  auto samples = [&](const std::string& extra) {
    Reply r = post(s.port, "/v1/audio/speech", speech(R"(, "response_format": "pcm")" + extra));
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body;
  };
  const std::string base = samples("");
  EXPECT_EQ(samples(R"(, "speed": 1.0)"), base);
  for (double speed : {0.5, 2.0}) {
    const std::string extra = R"(, "speed": )" + std::to_string(speed);
    const std::string a = samples(extra);
    EXPECT_EQ(a, samples(extra)) << "repeat at " << speed;
    EXPECT_NEAR(double(a.size()) / double(base.size()), 1.0 / speed, 0.05 / speed) << speed;
    Reply streamed =
        post(s.port, "/v1/audio/speech",
             speech(R"(, "response_format": "pcm", "stream_format": "audio")" + extra));
    EXPECT_EQ(streamed.body, a) << "streamed at " << speed;
  }
  for (const char* bad : {"0.1", "5"}) {
    Reply r = post(s.port, "/v1/audio/speech", speech(std::string(R"(, "speed": )") + bad));
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(r.json()["error"]["param"], "speed");
  }
}

TEST(OpenAiDropIn, ApiKeyGuardsEveryV1RouteAndNothingElse) {
  ServerOptions o = options("auth");
  o.api_key = "sk-test-123";
  Running s(o);
  const httplib::Headers none, wrong = {{"Authorization", "Bearer sk-test-124"}},
                               no_bearer = {{"Authorization", "sk-test-123"}},
                               other_header = {{"X-Api-Key", "sk-test-123"}},
                               right = {{"Authorization", "Bearer sk-test-123"}};
  const std::string ref = tone_wav(2.0);
  const std::string upload = R"({"name": "n", "ref_text": "t", "audio_base64": ")" +
                             server::base64_encode(std::vector<uint8_t>(ref.begin(), ref.end())) +
                             "\"}";
  struct Route {
    const char* method;
    const char* path;
    std::string body;
  };
  const std::vector<Route> routes = {{"POST", "/v1/audio/speech", speech("")},
                                     {"GET", "/v1/audio/voices", ""},
                                     {"POST", "/v1/audio/voices", upload},
                                     {"DELETE", "/v1/audio/voices/n", ""},
                                     {"GET", "/v1/models", ""},
                                     {"GET", "/v1/nothing", ""}};
  for (const auto& r : routes) {
    for (const auto* h : {&none, &wrong, &no_bearer, &other_header}) {
      Reply got = call(s.port, r.method, r.path, r.body, *h);
      EXPECT_EQ(got.status, 401) << r.method << " " << r.path;
      json e = got.json();
      EXPECT_EQ(e["error"]["code"], "invalid_api_key") << got.body;
      EXPECT_EQ(e["error"]["type"], "invalid_request_error");
      EXPECT_EQ(got.header("WWW-Authenticate"), "Bearer");
    }
  }
  // Multipart upload refused too; nothing was written by any refused upload.
  httplib::Client cli("127.0.0.1", s.port);
  auto mp = cli.Post("/v1/audio/voices",
                     httplib::MultipartFormDataItems{{"audio_sample", tone_wav(2.0), "r.wav", ""},
                                                     {"name", "n", "", ""},
                                                     {"ref_text", "t", "", ""}});
  ASSERT_TRUE(mp);
  EXPECT_EQ(mp->status, 401);
  EXPECT_TRUE(fs::is_empty(o.voices_dir)) << "a refused upload wrote into the voices directory";
  // The right key works on every route.
  EXPECT_EQ(call(s.port, "POST", "/v1/audio/speech", speech(""), right).status, 200);
  EXPECT_EQ(call(s.port, "POST", "/v1/audio/voices", upload, right).status, 200);
  EXPECT_EQ(call(s.port, "GET", "/v1/audio/voices", "", right).json()["voices"].size(), 1u);
  EXPECT_EQ(call(s.port, "DELETE", "/v1/audio/voices/n", "", right).status, 200);
  EXPECT_EQ(call(s.port, "GET", "/v1/models", "", right).status, 200);
  // Open without a key: health, metrics, the web page.
  EXPECT_EQ(get(s.port, "/health").status, 200);
  EXPECT_EQ(get(s.port, "/metrics").status, 200);
  Reply page = get(s.port, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<textarea id=\"text\""), std::string::npos);
  EXPECT_EQ(get(s.port, "/app.js").header("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(get(s.port, "/missing.js").status, 404);
}

TEST(OpenAiDropIn, RepliesSayWhyGenerationStopped) {
  Running s(options("stop"));
  // The fake makes 4 to 8 frames (0.32 to 0.64 s): 0.1 s cuts it, 60 s lets it end.
  Reply cut = post(s.port, "/v1/audio/speech", speech(R"(, "max_duration_s": 0.1)"));
  Reply full = post(s.port, "/v1/audio/speech", speech(""));
  EXPECT_EQ(cut.header("X-Drama-Stop-Reason"), "max_duration");
  EXPECT_EQ(full.header("X-Drama-Stop-Reason"), "end_of_speech");
  Reply sse = post(s.port, "/v1/audio/speech",
                   speech(R"(, "max_duration_s": 0.1, "stream_format": "sse")"));
  auto events = sse_events(sse.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "speech.audio.done");
  EXPECT_EQ(events.back()["stop_reason"], "max_duration");
  // A streamed reply to a client that takes trailers ends with the reason as a trailer.
  RawSocket raw(s.port);
  ASSERT_TRUE(raw.ok());
  const std::string body = speech(R"(, "max_duration_s": 0.1, "stream_format": "audio")");
  raw.send(
      "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body);
  const std::string reply = raw.read_all(10);
  EXPECT_NE(reply.find("Trailer: X-Drama-Stop-Reason"), std::string::npos) << reply.substr(0, 300);
  EXPECT_NE(reply.find("\r\n0\r\nX-Drama-Stop-Reason: max_duration\r\n\r\n"), std::string::npos);
  // Clients that did not ask for trailers get plain chunked replies (httplib's client is one).
  Reply plain = post(s.port, "/v1/audio/speech", speech(R"(, "stream_format": "audio")"));
  EXPECT_EQ(plain.status, 200);
  EXPECT_EQ(wav_data(plain.body), wav_data(full.body));
}

TEST(OpenAiDropIn, ReferenceLimitsAreTheCommandLinesRule) {
  Running s(options("limits"));
  for (double seconds : {0.5, 61.0}) {
    const std::string wav = tone_wav(seconds, 8000);
    httplib::Client cli("127.0.0.1", s.port);
    auto r = cli.Post(
        "/v1/audio/voices",
        httplib::MultipartFormDataItems{
            {"audio_sample", wav, "r.wav", ""}, {"name", "n", "", ""}, {"ref_text", "t", "", ""}});
    ASSERT_TRUE(r) << seconds << " s: " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 400) << seconds;
    std::string rule;
    try {
      rules::check_reference(seconds, 0.3f, "x");
    } catch (const rules::RuleError& e) {
      rule = std::string(e.what()).substr(2);
    }
    ASSERT_FALSE(rule.empty());
    // The same rule text as `drama voice write` prints (tests/cli/test_dropin_cli.cpp).
    const std::string rule_tail = rule.substr(rule.find("; a reference"));
    EXPECT_NE(r->body.find(rule_tail), std::string::npos) << r->body;
    const std::vector<uint8_t> bytes(wav.begin(), wav.end());
    Reply inline_ref =
        post(s.port, "/v1/audio/speech",
             speech(R"(, "ref_text": "t", "ref_audio": ")" + server::base64_encode(bytes) + "\""));
    EXPECT_EQ(inline_ref.status, 400) << seconds;
    EXPECT_NE(inline_ref.body.find(rule_tail), std::string::npos) << inline_ref.body;
  }
  EXPECT_TRUE(fs::is_empty(s.server->options().voices_dir));
}

TEST(OpenAiDropIn, KeyHelpers) {
  EXPECT_TRUE(server::bearer_matches("Bearer k1", "k1"));
  EXPECT_FALSE(server::bearer_matches("Bearer k1 ", "k1"));
  EXPECT_FALSE(server::bearer_matches("bearer k1", "k1"));
  EXPECT_FALSE(server::bearer_matches("Bearer ", ""));
  EXPECT_FALSE(server::bearer_matches("", "k1"));
  EXPECT_TRUE(server::route_needs_api_key("/v1/models"));
  EXPECT_TRUE(server::route_needs_api_key("/v1"));
  EXPECT_FALSE(server::route_needs_api_key("/v10"));
  EXPECT_FALSE(server::route_needs_api_key("/health"));
  EXPECT_FALSE(server::route_needs_api_key("/"));
  // Where `drama serve` warns when no key is set.
  for (const char* h : {"127.0.0.1", "127.0.0.2", "localhost", "::1"})
    EXPECT_TRUE(server::is_loopback_host(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.org"})
    EXPECT_FALSE(server::is_loopback_host(h)) << h;
  setenv("DRAMA_API_KEY", "from-env", 1);
  EXPECT_EQ(server::resolve_api_key("", "").value_or(""), "from-env");
  EXPECT_EQ(server::resolve_api_key("opt", "").value_or(""), "opt");
  unsetenv("DRAMA_API_KEY");
  EXPECT_FALSE(server::resolve_api_key("", ""));
  const fs::path file = temp_dir("keyfile") / "key";
  std::ofstream(file) << "  sk-file \n";
  EXPECT_EQ(server::resolve_api_key("", file.string()).value_or(""), "sk-file");
  EXPECT_THROW(server::resolve_api_key("a", file.string()), UsageError);
  EXPECT_THROW(server::resolve_api_key("", (file.string() + ".missing")), UsageError);
}

TEST(OpenAiDropIn, ASecondServerOnAHeldPortIsRefused) {
  Running first(options("port-a"));
  ServerOptions o = options("port-b");
  o.host = "127.0.0.1";
  o.port = first.port;
  FakeEngine engine;
  SpeechServer second(engine, o);
  EXPECT_THROW(second.bind(), Error);
  EXPECT_EQ(get(first.port, "/health").status, 200);
}

}  // namespace
}  // namespace drama::testing
