// The collector's error value: a code that maps one to one onto gRPC's, and a
// message that says what was wrong and where. Nothing in server/ throws.
#pragma once

#include <string>
#include <utility>

namespace castscope::collector {

enum class StatusCode {
  kOk,
  kInvalidArgument,
  kFailedPrecondition,
  kResourceExhausted,
  kUnauthenticated,
  kNotFound,
  kInternal,
  kUnavailable,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status invalid_argument(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
  static Status failed_precondition(std::string message) {
    return {StatusCode::kFailedPrecondition, std::move(message)};
  }
  static Status resource_exhausted(std::string message) {
    return {StatusCode::kResourceExhausted, std::move(message)};
  }
  static Status not_found(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
  static Status internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }
  static Status unavailable(std::string message) { return {StatusCode::kUnavailable, std::move(message)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace castscope::collector
