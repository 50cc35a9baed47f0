// Status and Result<T>: how errors travel inside cc. A Status is a result code plus a
// message that names what failed and where; CC_TRY returns early with it. The C API
// turns a Status into a ccResult_t and remembers the message for ccGetLastError.
#pragma once

#include <cc/cc.h>

#include <string>
#include <utility>
#include <variant>

namespace cc {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ccResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool isOk() const { return code_ == ccSuccess; }
  ccResult_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes context ("send to rank 3: ") so the outermost message says the operation.
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  ccResult_t code_ = ccSuccess;
  std::string message_;
};

inline Status invalidArgument(std::string message) {
  return Status(ccInvalidArgument, std::move(message));
}
inline Status invalidUsage(std::string message) {
  return Status(ccInvalidUsage, std::move(message));
}
inline Status remoteError(std::string message) { return Status(ccRemoteError, std::move(message)); }
inline Status timeoutError(std::string message) { return Status(ccTimeout, std::move(message)); }
inline Status internalError(std::string message) {
  return Status(ccInternalError, std::move(message));
}
// A failed system call: the message ends with strerror(errno).
Status systemError(const std::string& what, int errnoValue);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : value_(std::move(status)) {}  // NOLINT

  bool isOk() const { return std::holds_alternative<T>(value_); }
  Status status() const { return isOk() ? Status::ok() : std::get<Status>(value_); }
  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T* operator->() { return &std::get<T>(value_); }
  const T* operator->() const { return &std::get<T>(value_); }
  T& operator*() { return std::get<T>(value_); }
  const T& operator*() const { return std::get<T>(value_); }

 private:
  std::variant<T, Status> value_;
};

}  // namespace cc

#define CC_CONCAT_INNER(a, b) a##b
#define CC_CONCAT(a, b) CC_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define CC_TRY(expr)                               \
  do {                                             \
    ::cc::Status ccTryStatus_ = (expr);            \
    if (!ccTryStatus_.isOk()) return ccTryStatus_; \
  } while (0)

// `CC_ASSIGN_OR_RETURN(auto x, f())`: unwraps a Result<T> or returns its Status.
#define CC_ASSIGN_OR_RETURN(lhs, expr) \
  CC_ASSIGN_OR_RETURN_IMPL(CC_CONCAT(ccResult_, __LINE__), lhs, expr)
#define CC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.isOk()) return tmp.status();          \
  lhs = std::move(tmp).value()
