#include "util/request_rules.h"

#include <cmath>
#include <cstdio>

namespace drama::rules {

namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

[[noreturn]] void refuse(const char* field, const std::string& label, const std::string& rule) {
  throw RuleError(field, label + " " + rule);
}

}  // namespace

void check_temperature(double t, const std::string& label) {
  if (!(std::isfinite(t) && t >= kMinTemperature && t <= kMaxTemperature))
    refuse("temperature", label, "must be in [0, 2] (0 = greedy)");
}

void check_top_k(int64_t k, const std::string& label) {
  if (k < 0 || k > kMaxTopK) refuse("top_k", label, "must be in [0, 100000] (0 = no top-k)");
}

void check_top_p(double p, const std::string& label) {
  if (!(std::isfinite(p) && p > 0 && p <= 1)) refuse("top_p", label, "must be in (0, 1]");
}

void check_gamma(double g, const std::string& label) {
  if (!(std::isfinite(g) && g >= 0 && g <= kMaxGamma))
    refuse("cfg_scale", label, "must be in [0, 10] (1 = no guidance)");
}

void check_speed(double s, const std::string& label) {
  if (!(std::isfinite(s) && s >= kMinSpeed && s <= kMaxSpeed))
    refuse("speed", label, "must be in [0.25, 4] (1 = unchanged)");
}

void check_max_duration(double s, const std::string& label) {
  if (!(std::isfinite(s) && s > 0 && s <= kMaxDurationSeconds))
    refuse("max_duration_s", label, "must be in (0, 60] seconds");
}

void check_reference(double seconds, float peak, const std::string& label) {
  if (!(peak >= kSilencePeak)) refuse("audio", label, "is silent");
  if (seconds < kMinReferenceSeconds)
    refuse("audio", label,
           "is " + number(seconds) + " s long; a reference must be at least " +
               number(kMinReferenceSeconds) + " s (1 to 60 s)");
  if (seconds > kMaxReferenceSeconds)
    refuse("audio", label,
           "is " + number(seconds) + " s long; a reference must be at most " +
               number(kMaxReferenceSeconds) + " s (1 to 60 s)");
}

}  // namespace drama::rules
