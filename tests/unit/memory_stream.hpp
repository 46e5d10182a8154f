// SPDX-License-Identifier: Apache-2.0
// A reactor::ByteStream in memory, for connection tests without a socket: what the owner sends
// stays queued until the test lets the peer read it (drain), and what the peer sends reaches
// the owner when the test delivers it, in receives of a size the test picks. So a test decides
// exactly when the peer reads, which is what back-pressure and stalled-peer logic turn on, where
// a socketpair would need its kernel buffers filled first and would take what it likes.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "reactor/byte_stream.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::test {

class MemoryStream final : public reactor::ByteStream {
 public:
  // gone (optional) is set when the stream is destroyed: its owner frees it once closed, and a
  // test that kept a pointer to it learns there that the pointer is no longer good.
  MemoryStream(reactor::Reactor& r, reactor::StreamOwner& owner, bool* gone = nullptr)
      : reactor_(r), owner_(owner), gone_(gone) {
    closed_d_.owner = this;
    closed_d_.fn = [](reactor::Deferred* d) {
      auto* self = static_cast<reactor::OwnedDeferred<MemoryStream>*>(d)->owner;
      // The owner may free itself, and so this stream, here: nothing touches this after.
      self->owner_.on_closed(0);
    };
  }
  ~MemoryStream() override {
    reactor_.undefer(&closed_d_);
    if (gone_) *gone_ = true;
  }

  // ByteStream
  void start() override { started_ = true; }
  void send(const void* data, size_t len, reactor::SendDone* done) override {
    if (closing_) {
      if (done) done->fn(done);
      return;
    }
    queue_.push_back({static_cast<const uint8_t*>(data), len, done});
    queued_ += len;
  }
  void close() override {
    if (closing_) return;
    closing_ = true;
    release_dones();
    while (!queue_.empty()) {
      reactor::SendDone* done = queue_.front().done;
      queue_.pop_front();
      if (done) done->fn(done);
    }
    queued_ = 0;
    reactor_.defer(&closed_d_);
  }
  bool closing() const override { return closing_; }
  size_t queued_bytes() const override { return queued_; }
  uint64_t sent_bytes() const override { return sent_; }

  // The peer's side.
  bool started() const { return started_; }
  // The peer sends bytes: the owner receives them in pieces of at most chunk bytes, into the
  // place it names for each (recv_direct) as a socket stream's receives would.
  void deliver(const std::vector<uint8_t>& bytes, size_t chunk = 64 * 1024) {
    ASSERT_TRUE(started_) << "bytes delivered before the owner started the stream";
    size_t off = 0;
    while (off < bytes.size() && !closing_) {
      uint8_t* dst = nullptr;
      size_t room = 0;
      const size_t piece = std::min(chunk, bytes.size() - off);
      if (owner_.recv_direct(dst, room) && room > 0) {
        const size_t n = std::min(piece, room);
        std::memcpy(dst, bytes.data() + off, n);
        off += n;
        owner_.on_receive_direct(n);
      } else {
        owner_.on_receive(bytes.data() + off, piece);
        off += piece;
      }
    }
  }
  // From now on the peer's reads leave each segment's done pending until release_dones(), as
  // a socket's send completion may be reaped after the peer has read the bytes.
  void hold_dones(bool hold) { hold_dones_ = hold; }
  // What the stream says it may hold after delivery (a zero-copy TcpStream's allowance).
  void set_held_after_delivery(size_t n) { held_after_delivery_ = n; }
  size_t max_sends_held_after_delivery() const override { return held_after_delivery_; }
  void release_dones() {
    std::vector<reactor::SendDone*> dones;
    dones.swap(held_);
    for (reactor::SendDone* d : dones) d->fn(d);
  }

  // The peer reads up to max bytes of what is queued: they move to received(), and each
  // segment's done fires once all of it has gone. Returns the bytes moved.
  size_t drain(size_t max = SIZE_MAX) {
    size_t moved = 0;
    while (!queue_.empty() && moved < max) {
      Segment& s = queue_.front();
      const size_t n = std::min(s.len - s.off, max - moved);
      received_.insert(received_.end(), s.data + s.off, s.data + s.off + n);
      s.off += n;
      moved += n;
      queued_ -= n;  // before the done: what it runs sees the queue as the peer left it
      sent_ += n;
      if (s.off < s.len) break;
      reactor::SendDone* done = s.done;
      queue_.pop_front();
      if (done && hold_dones_) held_.push_back(done);
      else if (done) done->fn(done);
    }
    return moved;
  }
  // Everything the peer has read so far, and not yet consumed by the test.
  std::vector<uint8_t>& received() { return received_; }

 private:
  struct Segment {
    const uint8_t* data;
    size_t len;
    reactor::SendDone* done;
    size_t off = 0;
  };
  reactor::Reactor& reactor_;
  reactor::StreamOwner& owner_;
  bool* gone_;
  std::deque<Segment> queue_;
  size_t queued_ = 0;
  uint64_t sent_ = 0;
  bool started_ = false;
  bool closing_ = false;
  bool hold_dones_ = false;
  size_t held_after_delivery_ = 0;
  std::vector<reactor::SendDone*> held_;
  std::vector<uint8_t> received_;
  reactor::OwnedDeferred<MemoryStream> closed_d_;
};

}  // namespace nvtcp::test
