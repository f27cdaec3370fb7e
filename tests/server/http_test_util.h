// Helpers shared by the server tests: HTTP calls with streaming receivers, WAV/SSE parsing, raw
// sockets for hostile clients.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace drama::testing {

struct Reply {
  int status = -1;  // -1: no reply (connection failed or cancelled by us)
  httplib::Headers headers;
  std::string body;
  std::string header(const std::string& k) const {
    auto it = headers.find(k);
    return it == headers.end() ? "" : it->second;
  }
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// POST with a receiver that sees the body as it arrives; `on_chunk` returning false hangs up.
inline Reply post(int port, const std::string& path, const std::string& body,
                  const std::string& content_type = "application/json",
                  std::function<bool(const std::string& so_far)> on_chunk = {},
                  int timeout_s = 60) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(timeout_s, 0);
  cli.set_connection_timeout(5, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", content_type);
  Reply reply;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    reply.body.append(data, n);
    return on_chunk ? on_chunk(reply.body) : true;
  };
  auto res = cli.send(req);
  if (res) {
    reply.status = res->status;
    reply.headers = res->headers;
  }
  return reply;
}

// A request with extra headers; the body in full. PUT and POST send `body` as `type`.
inline Reply call(int port, const std::string& method, const std::string& path,
                  const std::string& body, const httplib::Headers& headers,
                  const std::string& type = "application/json") {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(30, 0);
  httplib::Result r = method == "GET"      ? cli.Get(path.c_str(), headers)
                      : method == "DELETE" ? cli.Delete(path.c_str(), headers)
                      : method == "PUT"    ? cli.Put(path.c_str(), headers, body, type.c_str())
                                           : cli.Post(path.c_str(), headers, body, type.c_str());
  Reply out;
  if (r) {
    out.status = r->status;
    out.headers = r->headers;
    out.body = r->body;
  }
  return out;
}

// GET, DELETE or PUT (an empty text/plain body) with no extra headers.
inline Reply get(int port, const std::string& path, const std::string& method = "GET") {
  return call(port, method, path, "", {}, "text/plain");
}

inline uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(s[at + size_t(i)]);
  return v;
}

// The data of a 44-byte-header PCM WAV (what the server writes).
inline std::string wav_data(const std::string& wav) {
  if (wav.size() < 44 || wav.compare(0, 4, "RIFF") != 0 || wav.compare(36, 4, "data") != 0)
    return {};
  return wav.substr(44);
}

// Mean absolute s16 value: > 0 means not silent.
inline double mean_abs_s16(const std::string& pcm) {
  if (pcm.size() < 2) return 0;
  double sum = 0;
  for (size_t i = 0; i + 1 < pcm.size(); i += 2) {
    int16_t v = int16_t(uint16_t(uint8_t(pcm[i])) | uint16_t(uint8_t(pcm[i + 1]) << 8));
    sum += std::abs(int(v));
  }
  return sum / double(pcm.size() / 2);
}

// SSE `data:` payloads in order.
inline std::vector<nlohmann::json> sse_events(const std::string& body) {
  std::vector<nlohmann::json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(nlohmann::json::parse(body.substr(pos + 6, end - pos - 6), nullptr, false));
    pos = end + 2;
  }
  return out;
}

// A raw TCP connection to 127.0.0.1:port (hostile clients: stalls, oversized bodies).
class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool send(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size());
  }
  // Reads until the peer closes or `timeout_s` passes; returns what arrived.
  std::string read_all(int timeout_s, bool* closed = nullptr) {
    timeval tv{timeout_s, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string out;
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) {
        out.append(buf, size_t(n));
        continue;
      }
      if (closed) *closed = n == 0 || (n < 0 && errno == ECONNRESET);
      return out;
    }
  }

 private:
  int fd_ = -1;
};

}  // namespace drama::testing
