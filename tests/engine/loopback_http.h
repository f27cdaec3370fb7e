// A tiny HTTP/1.1 file server on 127.0.0.1 for download tests, with plain sockets (the engine
// tests do not link cpp-httplib). Each route can misbehave on purpose: corrupt a byte, drop the
// connection halfway, send too much or too little, answer 404 or redirect.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace drama::test {

enum class Fault { none, corrupt, drop_halfway, extra_bytes, short_no_length, not_found, redirect };

class LoopbackHttp {
 public:
  LoopbackHttp() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 16) != 0)
      throw std::runtime_error("loopback server: cannot listen");
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~LoopbackHttp() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void put(const std::string& path, std::string body, Fault fault = Fault::none) {
    std::lock_guard<std::mutex> g(mutex_);
    routes_[path] = {std::move(body), fault};
  }
  int requests() const { return requests_; }

 private:
  struct Route {
    std::string body;
    Fault fault = Fault::none;
  };

  static void send_all(int fd, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      handle(c);
      ::close(c);
    }
  }

  void handle(int c) {
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      request.append(buf, static_cast<size_t>(n));
    }
    ++requests_;
    const size_t sp1 = request.find(' '), sp2 = request.find(' ', sp1 + 1);
    std::string path = request.substr(sp1 + 1, sp2 - sp1 - 1);
    bool redirected = false;
    if (path.rfind("/cdn", 0) == 0) {
      path = path.substr(4);
      redirected = true;
    }
    Route route;
    {
      std::lock_guard<std::mutex> g(mutex_);
      auto it = routes_.find(path);
      if (it == routes_.end())
        route.fault = Fault::not_found;
      else
        route = it->second;
    }
    const std::string& body = route.body;
    const std::string length = "Content-Length: " + std::to_string(body.size()) + "\r\n";
    switch (redirected ? Fault::none : route.fault) {
      case Fault::none:
        send_all(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n" + length + "\r\n" + body);
        break;
      case Fault::corrupt: {
        std::string bad = body;
        bad[bad.size() / 2] ^= 1;
        send_all(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n" + length + "\r\n" + bad);
        break;
      }
      case Fault::drop_halfway:
        send_all(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n" + length + "\r\n" +
                        body.substr(0, body.size() / 2));
        ::shutdown(c, SHUT_RDWR);
        break;
      case Fault::extra_bytes:
        send_all(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: " +
                        std::to_string(body.size() + 7) + "\r\n\r\n" + body + "1234567");
        break;
      case Fault::short_no_length:  // no length: the close ends the body, curl sees success
        send_all(c,
                 "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body.substr(0, body.size() - 1));
        break;
      case Fault::not_found:
        send_all(c,
                 "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 9\r\n\r\n"
                 "not found");
        break;
      case Fault::redirect:
        send_all(c, "HTTP/1.1 302 Found\r\nConnection: close\r\nLocation: /cdn" + path +
                        "\r\nContent-Length: 0\r\n\r\n");
        break;
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mutex_;
  std::map<std::string, Route> routes_;
  std::thread thread_;
};

}  // namespace drama::test
