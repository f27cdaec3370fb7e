#include "server/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cstdlib>
#include <fstream>

#include "util/error.h"

namespace drama::server {

namespace {

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  const auto end = s.find_last_not_of(ws);
  s.erase(end == std::string::npos ? 0 : end + 1);
  return s;
}

}  // namespace

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.substr(0, 4) == "127.";
}

bool route_needs_api_key(std::string_view path) {
  return path == "/v1" || path.substr(0, 4) == "/v1/";
}

bool bearer_matches(std::string_view authorization, std::string_view key) {
  const std::string expected = "Bearer " + std::string(key);
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(authorization.data()), authorization.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), b);
  return !key.empty() && CRYPTO_memcmp(a, b, sizeof a) == 0;
}

std::optional<std::string> resolve_api_key(const std::string& key_option,
                                           const std::string& key_file_option) {
  if (!key_option.empty() && !key_file_option.empty())
    throw UsageError("give --api-key or --api-key-file, not both");
  if (!key_option.empty()) {
    if (trim(key_option).empty()) throw UsageError("--api-key must not be blank");
    return key_option;
  }
  if (!key_file_option.empty()) {
    std::ifstream f(key_file_option);
    if (!f) throw UsageError("--api-key-file " + key_file_option + ": cannot be read");
    std::string line;
    std::getline(f, line);
    line = trim(line);
    if (line.empty()) throw UsageError("--api-key-file " + key_file_option + ": the key is empty");
    return line;
  }
  if (const char* env = std::getenv("DRAMA_API_KEY"); env && *env) {
    std::string k = trim(env);
    if (k.empty()) throw UsageError("DRAMA_API_KEY is blank");
    return k;
  }
  return std::nullopt;
}

}  // namespace drama::server
