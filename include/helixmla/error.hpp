// Errors helixmla throws. Every rejection of caller input names the field,
// the index (or -1 when the field is a scalar) and the offending value.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace helixmla {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Caller input violates a rule of the batch model.
class InvalidArgument : public Error {
 public:
  InvalidArgument(std::string field, std::int64_t index, std::string value, std::string rule);

  const std::string& field() const noexcept { return field_; }
  std::int64_t index() const noexcept { return index_; }
  const std::string& value() const noexcept { return value_; }
  const std::string& rule() const noexcept { return rule_; }

 private:
  std::string field_;
  std::int64_t index_;
  std::string value_;
  std::string rule_;
};

// No backend can run a phase, or a forced backend cannot run it.
class NoCapableBackend : public Error {
 public:
  using Error::Error;
};

// A CUDA, NVRTC or NCCL call failed, or a peer did not answer in time.
class RuntimeFailure : public Error {
 public:
  using Error::Error;
};

}  // namespace helixmla
