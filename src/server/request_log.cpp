// Structured request logs through spdlog: one translation unit includes it, the rest of the
// server calls these functions.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "server/request_log.h"

namespace drama::server {

namespace {
spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto lg = std::make_shared<spdlog::logger>("drama.server", sink);
    lg->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
    lg->flush_on(spdlog::level::info);
    return lg;
  }();
  return *l;
}
}  // namespace

void log_request(const RequestLogLine& r) {
  std::string gen;
  if (r.frames >= 0) {
    gen = fmt::format(" frames={} ttfa_s={:.3f} rtf={:.3f} total_s={:.3f}", r.frames,
                      r.seconds_to_first_audio, r.real_time_factor, r.seconds_total);
  }
  std::string seed = r.has_seed ? fmt::format(" seed={}", r.seed) : "";
  logger().info("request id={} method={} route={} status={} outcome={}{}{}", r.id, r.method,
                r.route, r.status, r.outcome, gen, seed);
}

void log_info(const std::string& message) {
  logger().info("{}", message);
}
void log_warning(const std::string& message) {
  logger().warn("{}", message);
}

}  // namespace drama::server
