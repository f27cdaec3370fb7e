// Structured logs: one line per request on stderr (id, route, status, outcome, frames, time to
// first audio, real-time factor). Never the input text or audio.
#pragma once

#include <cstdint>
#include <string>

namespace drama::server {

struct RequestLogLine {
  uint64_t id = 0;
  std::string method;
  std::string route;  // the matched route pattern or path, never a query string
  int status = 0;
  std::string outcome;
  int64_t frames = -1;  // -1: no generation
  double seconds_to_first_audio = 0;
  double real_time_factor = 0;
  double seconds_total = 0;
  uint64_t seed = 0;
  bool has_seed = false;
};

void log_request(const RequestLogLine& line);
void log_info(const std::string& message);
void log_warning(const std::string& message);

}  // namespace drama::server
