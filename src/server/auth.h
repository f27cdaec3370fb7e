// API keys (interfaces.md: --api-key, --api-key-file, DRAMA_API_KEY). With a key set, every
// /v1/* route requires `Authorization: Bearer KEY`; /health, /metrics and the web page at /
// stay open. The comparison takes the same time whatever the presented key is.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace drama::server {

// True for addresses only this machine reaches (127.0.0.0/8, ::1, localhost): listening
// anywhere else without a key makes `drama serve` warn at start.
bool is_loopback_host(std::string_view host);

// True when `path` needs the key: /v1 and everything under it.
bool route_needs_api_key(std::string_view path);

// True when `authorization` (the header's value) is exactly "Bearer <key>". Constant time in
// the presented value: both sides are hashed (SHA-256) and the digests compared with
// CRYPTO_memcmp, so neither the key's length nor a matching prefix shows in the timing.
bool bearer_matches(std::string_view authorization, std::string_view key);

// The key from --api-key, --api-key-file (first line, surrounding whitespace removed) or the
// DRAMA_API_KEY environment variable, in that order; nullopt when none is set. An empty key, or
// an unreadable or empty key file, is a UsageError naming the option.
std::optional<std::string> resolve_api_key(const std::string& key_option,
                                           const std::string& key_file_option);

}  // namespace drama::server
