// SPDX-License-Identifier: Apache-2.0
// Reactor::complete_from_any_thread: completions other threads hand back (as librbd's
// callback threads do) run once each, on the reactor's thread, each thread's in its order, and
// wake a reactor that sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "reactor/reactor.hpp"

namespace reactor_remote_test {

using nvtcp::reactor::Reactor;
using nvtcp::reactor::RemoteCompletion;

namespace {

struct Done : RemoteCompletion {
  unsigned producer = 0;
  unsigned seq = 0;
  unsigned runs = 0;
  std::thread::id ran_on{};
  std::vector<unsigned>* last_seq = nullptr;  // per producer, the reactor's view
  bool in_order = true;
};

void on_done(RemoteCompletion* self) {
  auto* d = static_cast<Done*>(self);
  ++d->runs;
  d->ran_on = std::this_thread::get_id();
  unsigned& last = (*d->last_seq)[d->producer];
  if (d->seq != last + 1) d->in_order = false;
  last = d->seq;
}

}  // namespace

TEST(ReactorRemote, CompletionsFromManyThreadsRunOnceEachOnTheReactorInEachThreadsOrder) {
  Reactor r;
  constexpr unsigned kThreads = 4, kEach = 5000;
  std::vector<Done> done(kThreads * kEach);
  std::vector<unsigned> last_seq(kThreads, 0);
  for (unsigned t = 0; t < kThreads; ++t)
    for (unsigned i = 0; i < kEach; ++i) {
      Done& d = done[t * kEach + i];
      d.fn = on_done;
      d.producer = t;
      d.seq = i + 1;
      d.last_seq = &last_seq;
    }
  std::vector<std::thread> producers;
  for (unsigned t = 0; t < kThreads; ++t)
    producers.emplace_back([&, t] {
      for (unsigned i = 0; i < kEach; ++i) r.complete_from_any_thread(&done[t * kEach + i]);
    });
  auto all_seen = [&] {
    for (unsigned t = 0; t < kThreads; ++t)
      if (last_seq[t] != kEach) return false;
    return true;
  };
  while (!all_seen()) r.run_once(100'000);
  for (auto& p : producers) p.join();
  r.run_once(0);
  for (const Done& d : done) {
    EXPECT_EQ(d.runs, 1u) << "producer " << d.producer << " #" << d.seq;
    EXPECT_EQ(d.ran_on, std::this_thread::get_id());
    EXPECT_TRUE(d.in_order) << "producer " << d.producer << " #" << d.seq << " ran out of its order";
  }
}

TEST(ReactorRemote, ACompletionWakesAReactorAsleepInIoUring) {
  Reactor r;
  std::vector<unsigned> last_seq(1, 0);
  Done d;
  d.fn = on_done;
  d.seq = 1;
  d.last_seq = &last_seq;
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the reactor is most likely asleep by now
    r.complete_from_any_thread(&d);
  });
  // Without the wake-up the turn would end at its 20 s timeout with nothing handled.
  unsigned handled = 0;
  while (d.runs == 0) handled += r.run_once(20'000'000);
  producer.join();
  EXPECT_GE(handled, 1u) << "the reactor woke for its timeout, not for the completion";
  EXPECT_EQ(d.runs, 1u);
}

}  // namespace reactor_remote_test
