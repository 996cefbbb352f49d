#pragma once
// A small std::expected stand-in (C++20 has none): errors are values at every
// boundary of the SDK, and exceptions never cross the event loop.
#include <string>
#include <utility>
#include <variant>

#include "fleetlink/export.hpp"

namespace fleetlink {

enum class Errc {
  ok = 0,
  truncated,        // input ended inside a value
  malformed,        // bytes are not msgpack, or not the expected shape
  missing_field,    // a required field is absent
  bad_field,        // a field has the wrong type or an out-of-range value
  unknown_type,     // a well-formed frame of a message type this side does not know
  unsupported_version,
  too_large,        // over a configured size limit
  io,               // file or socket error
  invalid_argument,
};

FLEETLINK_API const char* to_string(Errc e) noexcept;

struct Error {
  Errc code = Errc::malformed;
  std::string detail;
};

template <typename T>
class Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}          // NOLINT
  Expected(Error error) : v_(std::in_place_index<1>, std::move(error)) {}      // NOLINT

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class Expected<void> {
 public:
  Expected() = default;
  Expected(Error error) : err_(std::move(error)), ok_(false) {}  // NOLINT
  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const Error& error() const& { return err_; }

 private:
  Error err_{Errc::ok, {}};
  bool ok_ = true;
};

inline Error make_error(Errc code, std::string detail) { return Error{code, std::move(detail)}; }

}  // namespace fleetlink
