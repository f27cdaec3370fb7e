// Watches the TCP connection a request arrived on, so a generation can stop when the client
// hangs up even while nothing is being written (a whole reply is sent only at its end).
//
// httplib 0.11 (Debian 12) gives a handler the request's addresses but not its socket, so the
// socket is found by its endpoints: the descriptor whose local and peer address and port are the
// request's. The connection is owned by the thread running the handler, so the descriptor stays
// open (and cannot be reused) for as long as the handler and its content provider run.
#pragma once

#include <optional>
#include <string>

namespace drama {

class ConnectionWatch {
 public:
  // The open socket with these endpoints, or nullopt (not found: the watch then never fires).
  static std::optional<ConnectionWatch> find(const std::string& local_addr, int local_port,
                                             const std::string& remote_addr, int remote_port);

  // True once the peer has closed or reset the connection. A client that only half-closes
  // (shuts down its sending side and still reads) is treated as gone, as most servers do.
  bool peer_closed() const;

  int fd() const { return fd_; }

 private:
  explicit ConnectionWatch(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace drama
