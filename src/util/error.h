// Errors: one exception type carrying one clear sentence that names the file, tensor, field or
// argument. Caught at the edge: the CLI prints it and exits 1, the server maps it to an HTTP error.
#pragma once

#include <stdexcept>
#include <string>

namespace drama {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A bad request or argument (CLI exit 2, HTTP 400) as opposed to a runtime failure.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message) {}
};

}  // namespace drama
