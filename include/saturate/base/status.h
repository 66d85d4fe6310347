// Status and Result<T>: how every saturate library boundary reports failure.
//
// A Status is either OK or carries a code and a human-readable message that
// names what failed (file, record, field, flag). Library code never prints;
// it returns a Status and lets the caller (CLI, Python layer) decide what to
// show. Result<T> holds either a T or a non-OK Status.
//
// Choosing a code (after absl::StatusCode):
//   InvalidArgument  - the caller passed something wrong (flag, option, path).
//   NotFound         - a named file, field or record does not exist.
//   AlreadyExists    - refusing to overwrite something (e.g. pack without --force).
//   Corruption       - stored bytes fail a check (checksum, magic, bounds).
//   IOError          - the operating system refused (open, read, write, fsync).
//   Unimplemented    - a valid request this build cannot serve (e.g. no CUDA).
//   Internal         - a bug in saturate itself.
//   Cancelled        - the work was stopped on request.
//
// Thread-safety: Status and Result are values; distinct objects may be used
// from distinct threads without synchronization.
#ifndef SATURATE_BASE_STATUS_H_
#define SATURATE_BASE_STATUS_H_

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace saturate {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kCorruption = 4,
  kIOError = 5,
  kUnimplemented = 6,
  kInternal = 7,
  kCancelled = 8,
  kUnavailable = 9,  // what was asked for is not on this machine (e.g. no GPU)
};

// Returns a stable lower-case name for `code` ("corruption", "io_error", ...).
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view msg) {
    return Status(StatusCode::kInvalidArgument, msg);
  }
  static Status NotFound(std::string_view msg) { return Status(StatusCode::kNotFound, msg); }
  static Status AlreadyExists(std::string_view msg) {
    return Status(StatusCode::kAlreadyExists, msg);
  }
  static Status Corruption(std::string_view msg) { return Status(StatusCode::kCorruption, msg); }
  static Status IOError(std::string_view msg) { return Status(StatusCode::kIOError, msg); }
  // An IOError whose message ends with strerror(errno_value).
  static Status FromErrno(std::string_view context, int errno_value);
  static Status Unimplemented(std::string_view msg) {
    return Status(StatusCode::kUnimplemented, msg);
  }
  static Status Internal(std::string_view msg) { return Status(StatusCode::kInternal, msg); }
  static Status Cancelled(std::string_view msg) { return Status(StatusCode::kCancelled, msg); }
  static Status Unavailable(std::string_view msg) { return Status(StatusCode::kUnavailable, msg); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "corruption: shard-00001.srec: record 17: checksum mismatch".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` ("context: message").
  // OK stays OK. Used to add the file/record/stage as an error travels up.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  Status(StatusCode code, std::string_view msg) : code_(code), message_(msg) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value of type T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "Result constructed from an OK Status without a value");
    if (status_.ok()) status_ = Status::Internal("Result built from OK status without value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace saturate

#define SATURATE_CONCAT_INNER_(a, b) a##b
#define SATURATE_CONCAT_(a, b) SATURATE_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define SATURATE_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::saturate::Status _saturate_status = (expr);        \
    if (!_saturate_status.ok()) return _saturate_status; \
  } while (0)

// `lhs = value of rexpr` (a Result<T>), or returns its Status from the
// enclosing function. `lhs` may be a declaration: SATURATE_ASSIGN_OR_RETURN(auto x, F());
#define SATURATE_ASSIGN_OR_RETURN(lhs, rexpr) \
  SATURATE_ASSIGN_OR_RETURN_IMPL_(SATURATE_CONCAT_(_saturate_result_, __LINE__), lhs, rexpr)
#define SATURATE_ASSIGN_OR_RETURN_IMPL_(result, lhs, rexpr) \
  auto result = (rexpr);                                    \
  if (!result.ok()) return result.status();                 \
  lhs = std::move(result).value()

#endif  // SATURATE_BASE_STATUS_H_
