// HTTP errors in OpenAI's shape (interfaces.md): {"error": {"message", "type", "param", "code"}}.
// Handlers throw ApiError; the server turns it into the status and body.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace drama::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string code, const std::string& message,
           std::optional<std::string> param = std::nullopt)
      : std::runtime_error(message),
        status_(status),
        code_(std::move(code)),
        param_(std::move(param)) {}

  int status() const { return status_; }
  const std::string& code() const { return code_; }
  const std::optional<std::string>& param() const { return param_; }

 private:
  int status_;
  std::string code_;
  std::optional<std::string> param_;
};

// "invalid_request_error" for 4xx, "server_error" for 5xx (OpenAI's two common types).
inline std::string error_type_for(int status) {
  return status >= 500 ? "server_error" : "invalid_request_error";
}

inline nlohmann::json error_body(int status, const std::string& code, const std::string& message,
                                 const std::optional<std::string>& param = std::nullopt) {
  nlohmann::json e = {{"message", message},
                      {"type", error_type_for(status)},
                      {"param", param ? nlohmann::json(*param) : nlohmann::json(nullptr)},
                      {"code", code}};
  return {{"error", e}};
}

}  // namespace drama::server
