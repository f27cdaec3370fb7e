// Standard base64 (RFC 4648, with padding) for SSE audio deltas and JSON-borne audio.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace drama::server {

std::string base64_encode(std::span<const uint8_t> bytes);
// nullopt for anything that is not canonical padded base64 (whitespace is not allowed).
std::optional<std::vector<uint8_t>> base64_decode(std::string_view text);

}  // namespace drama::server
