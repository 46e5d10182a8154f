// SPDX-License-Identifier: Apache-2.0
// Asynchronous events waiting for the admin thread, and how often they are logged. A target
// decides how many events it reports and how fast: neither the memory they take nor the log
// lines they cost may grow with that. Pure: unit-tested on values, no controller needed.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace nvtcp::host::detail {

// What identifies an event in an AER completion's dw0: type (bits 2:0), information (15:8) and
// log page (23:16). Reading that log page once answers every report of the same event.
constexpr uint32_t async_event_key(uint32_t dw0) { return dw0 & 0x00FFFF07u; }

// Events whose log page is still to be read, oldest first, in a fixed array. An event already
// waiting is not queued twice; past kCapacity different ones the rest are counted, not kept.
class EventBacklog {
 public:
  static constexpr size_t kCapacity = 16;
  enum class Push : uint8_t { Queued, Coalesced, Dropped };

  Push push(uint32_t dw0) {
    for (size_t i = 0; i < size_; ++i)
      if (async_event_key(q_[(head_ + i) % kCapacity]) == async_event_key(dw0)) return Push::Coalesced;
    if (size_ == kCapacity) {
      ++dropped_;
      return Push::Dropped;
    }
    q_[(head_ + size_++) % kCapacity] = dw0;
    return Push::Queued;
  }
  bool pop(uint32_t& dw0) {
    if (size_ == 0) return false;
    dw0 = q_[head_];
    head_ = (head_ + 1) % kCapacity;
    --size_;
    return true;
  }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  uint64_t dropped() const { return dropped_; }  // since construction

 private:
  std::array<uint32_t, kCapacity> q_{};
  size_t head_ = 0;
  size_t size_ = 0;
  uint64_t dropped_ = 0;
};

constexpr bool is_power_of_two(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

// Whether an event's log line is written. A flood of one event logs its 1st, 2nd, 4th, 8th, ...
// report (the line says how many there were); an event quiet for kQuietNs starts counting
// again, so a rare event is logged every time it happens. A few events are followed at once;
// a new one takes the place of the one seen longest ago.
class EventLogLimiter {
 public:
  static constexpr uint64_t kQuietNs = 60ull * 1000 * 1000 * 1000;
  static constexpr size_t kTracked = 8;

  // Counts a report of dw0 at now_ns; returns how many reports of it this makes when the line
  // is to be written, 0 when it is not.
  uint64_t note(uint32_t dw0, uint64_t now_ns) {
    const uint32_t key = async_event_key(dw0);
    Slot* s = nullptr;
    for (Slot& t : slots_)
      if (t.count && t.key == key) s = &t;
    if (!s) {  // a free slot, else the one seen longest ago
      s = &slots_[0];
      for (Slot& t : slots_) {
        if (!t.count) {
          s = &t;
          break;
        }
        if (t.last_ns < s->last_ns) s = &t;
      }
      *s = Slot{key, 0, now_ns};
    }
    if (now_ns - s->last_ns >= kQuietNs) s->count = 0;
    s->last_ns = now_ns;
    ++s->count;
    return is_power_of_two(s->count) ? s->count : 0;
  }

 private:
  struct Slot {
    uint32_t key = 0;
    uint64_t count = 0;  // 0: free
    uint64_t last_ns = 0;
  };
  std::array<Slot, kTracked> slots_{};
};

}  // namespace nvtcp::host::detail
