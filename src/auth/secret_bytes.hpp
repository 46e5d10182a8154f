// SPDX-License-Identifier: Apache-2.0
// Key material that is wiped from memory when it goes: every secret, transformed key, DH
// private value and derived PSK lives in one of these, never in a plain vector or string.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace nvtcp::auth {

// Overwrites n bytes at p in a way the compiler cannot drop (OPENSSL_cleanse).
void wipe(void* p, size_t n);

class SecretBytes {
 public:
  SecretBytes() = default;
  explicit SecretBytes(size_t n) : b_(n) {}
  SecretBytes(const uint8_t* p, size_t n) : b_(p, p + n) {}
  explicit SecretBytes(std::span<const uint8_t> s) : b_(s.begin(), s.end()) {}
  ~SecretBytes() { clear(); }
  SecretBytes(const SecretBytes& o) : b_(o.b_) {}
  SecretBytes& operator=(const SecretBytes& o) {
    if (this != &o) {
      clear();
      b_ = o.b_;
    }
    return *this;
  }
  SecretBytes(SecretBytes&& o) noexcept : b_(std::move(o.b_)) { o.b_.clear(); }
  SecretBytes& operator=(SecretBytes&& o) noexcept {
    if (this != &o) {
      clear();
      b_ = std::move(o.b_);
      o.b_.clear();
    }
    return *this;
  }

  // Wipes and empties.
  void clear() {
    if (!b_.empty()) wipe(b_.data(), b_.size());
    b_.clear();
  }
  // Resizes, wiping what was there first (a reallocation would leave a copy behind).
  void resize(size_t n) {
    clear();
    b_.resize(n);
  }
  uint8_t* data() { return b_.data(); }
  const uint8_t* data() const { return b_.data(); }
  size_t size() const { return b_.size(); }
  bool empty() const { return b_.empty(); }
  std::span<const uint8_t> span() const { return {b_.data(), b_.size()}; }
  bool operator==(const SecretBytes& o) const { return b_ == o.b_; }

 private:
  std::vector<uint8_t> b_;
};

// A string holding key text ("DHHC-1:..."), wiped when it goes.
class SecretString {
 public:
  SecretString() = default;
  explicit SecretString(std::string_view s) : s_(s.begin(), s.end()) {}
  ~SecretString() { clear(); }
  SecretString(const SecretString& o) : s_(o.s_) {}
  SecretString& operator=(const SecretString& o) {
    if (this != &o) {
      clear();
      s_ = o.s_;
    }
    return *this;
  }
  SecretString(SecretString&& o) noexcept : s_(std::move(o.s_)) { o.s_.clear(); }
  SecretString& operator=(SecretString&& o) noexcept {
    if (this != &o) {
      clear();
      s_ = std::move(o.s_);
      o.s_.clear();
    }
    return *this;
  }
  void clear() {
    if (!s_.empty()) wipe(s_.data(), s_.size());
    s_.clear();
  }
  std::string_view view() const { return {s_.data(), s_.size()}; }
  bool empty() const { return s_.empty(); }

 private:
  std::vector<char> s_;
};

}  // namespace nvtcp::auth
