#include "saturate/base/status.h"

#include <cstring>

namespace saturate {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid_argument";
    case StatusCode::kNotFound:
      return "not_found";
    case StatusCode::kAlreadyExists:
      return "already_exists";
    case StatusCode::kCorruption:
      return "corruption";
    case StatusCode::kIOError:
      return "io_error";
    case StatusCode::kUnimplemented:
      return "unimplemented";
    case StatusCode::kInternal:
      return "internal";
    case StatusCode::kCancelled:
      return "cancelled";
    case StatusCode::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

Status Status::FromErrno(std::string_view context, int errno_value) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(errno_value);
  return Status(StatusCode::kIOError, msg);
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, msg);
}

}  // namespace saturate
