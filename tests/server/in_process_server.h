// The HTTP layer in process: a SpeechServer on loopback in front of a FakeEngine, stopped and
// joined when it goes out of scope, and a fresh temporary folder per test (under DRAMA_TEST_TMP
// when set). Shared by the in-process suites (test_http_fake.cpp, test_openai_dropin.cpp).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "server/fake_engine.h"
#include "server/speech_server.h"

namespace drama::testing {

// <DRAMA_TEST_TMP or /tmp>/<prefix>-<name>-<pid>, emptied.
inline std::filesystem::path fresh_temp_dir(const std::string& prefix, const std::string& name) {
  const char* base = std::getenv("DRAMA_TEST_TMP");
  const std::filesystem::path dir = std::filesystem::path(base ? base : "/tmp") /
                                    (prefix + "-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Binds 127.0.0.1 at o.port (0: any free port, in `port` after construction).
struct InProcessServer {
  FakeEngine engine;
  std::unique_ptr<server::SpeechServer> server;
  std::thread thread;
  int port = 0;

  explicit InProcessServer(server::ServerOptions o) {
    o.host = "127.0.0.1";
    if (o.provenance.empty()) o.provenance = "override:fake";
    server = std::make_unique<server::SpeechServer>(engine, o);
    port = server->bind();
    thread = std::thread([this] { server->run(); });
  }
  ~InProcessServer() {
    server->stop();
    thread.join();
  }
};

}  // namespace drama::testing
