#include "engine/request_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/error.h"

namespace orchid::engine {
namespace {

using namespace std::chrono_literals;

RequestEvent token(int32_t id) {
  RequestEvent e;
  e.token_ids = {id};
  e.text = std::to_string(id) + ",";
  return e;
}

TEST(RequestStream, DeliversInOrderAcrossThreadsAndEndsOnce) {
  auto stream = std::make_shared<RequestStream>(7);
  std::atomic<int> notified{0};
  stream->set_listener([&] { ++notified; });
  std::thread producer([&] {
    for (int i = 0; i < 1000; ++i) stream->push(token(i));
    RequestEvent last;
    last.finish = FinishReason::kLength;
    last.usage.completion_tokens = 1000;
    stream->push(last);
  });
  std::vector<int32_t> got;
  bool finished = false;
  while (!finished) {
    auto ev = stream->next(5s);
    ASSERT_TRUE(ev.has_value());
    got.insert(got.end(), ev->token_ids.begin(), ev->token_ids.end());
    finished = ev->finished();
  }
  producer.join();
  ASSERT_EQ(got.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(got[size_t(i)], i);
  EXPECT_EQ(notified.load(), 1001);
  EXPECT_TRUE(stream->finished());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(stream->next(10s).has_value());  // after the final event: at once, no wait
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_THROW(stream->push(token(1)), InternalError);
}

TEST(RequestStream, PollDrainTimeoutAndMerging) {
  RequestStream s(1);
  EXPECT_FALSE(s.poll().has_value());
  EXPECT_FALSE(s.next(1ms).has_value());
  s.push(token(1));
  EXPECT_EQ(s.poll()->token_ids, std::vector<int32_t>{1});
  // Events not taken yet are merged into one.
  s.push(token(2));
  s.push_token(3, nullptr, "3,");
  s.push(token(4));
  auto rest = s.drain();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].token_ids, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(rest[0].text, "2,3,4,");
  EXPECT_FALSE(s.finished());
  runtime::SampledToken lp;
  lp.token = 5;
  lp.logprob = -0.5f;
  s.push_token(5, &lp, "");
  RequestEvent last;
  last.finish = FinishReason::kAbort;
  s.push(last);
  auto ev = s.poll();
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->token_ids, std::vector<int32_t>{5});
  ASSERT_EQ(ev->logprobs.size(), 1u);
  EXPECT_EQ(ev->logprobs[0].logprob, -0.5f);
  EXPECT_EQ(ev->finish, FinishReason::kAbort);
  EXPECT_THROW(s.push_token(6, nullptr, ""), InternalError);
}

TEST(RequestStream, WaitAllMergesEverything) {
  RequestStream s(1);
  s.push(token(4));
  s.push(token(5));
  RequestEvent last = token(6);
  last.finish = FinishReason::kStop;
  last.stop_token = 6;
  s.push(last);
  const RequestEvent all = s.wait_all();
  EXPECT_EQ(all.token_ids, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(all.text, "4,5,6,");
  EXPECT_EQ(all.finish, FinishReason::kStop);
  EXPECT_EQ(all.stop_token, 6);
}

}  // namespace
}  // namespace orchid::engine
