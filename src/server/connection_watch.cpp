#include "server/connection_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

namespace drama {
namespace {

// Numeric host and port of an address, as httplib formats Request::remote_addr.
bool endpoint(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  char buf[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, buf, sizeof buf, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = buf;
  port = std::atoi(serv);
  return true;
}

bool matches(int fd, const std::string& local_addr, int local_port, const std::string& remote_addr,
             int remote_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  if (!endpoint(a, len, host, port) || port != remote_port || host != remote_addr) return false;
  len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  return endpoint(a, len, host, port) && port == local_port && host == local_addr;
}

}  // namespace

std::optional<ConnectionWatch> ConnectionWatch::find(const std::string& local_addr, int local_port,
                                                     const std::string& remote_addr,
                                                     int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return std::nullopt;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return std::nullopt;
  std::optional<ConnectionWatch> found;
  int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (matches(int(fd), local_addr, local_port, remote_addr, remote_port)) {
      found = ConnectionWatch(int(fd));
      break;
    }
  }
  closedir(dir);
  return found;
}

bool ConnectionWatch::peer_closed() const {
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace drama
