// Percent-decoding of request paths: every escape becomes its byte, in either case of hex digits; broken
// escapes and NUL are refused. What the OpenAI SDK sends is checked end to end in
// tests/python/test_server_hardening.py; here the rules at the edges.
#include "server/url_path.h"

#include <gtest/gtest.h>

namespace orchid::server {
namespace {

TEST(PercentDecodePath, DecodesEveryEscapeOnce) {
  EXPECT_EQ(percent_decode_path("/v1/models/openai%2Fgpt-oss-20b"), "/v1/models/openai/gpt-oss-20b");
  EXPECT_EQ(percent_decode_path("/a%2fb%2Fc"), "/a/b/c");
  EXPECT_EQ(percent_decode_path("/%2541"), "/%41");  // decoded once, not again
  EXPECT_EQ(percent_decode_path("/a+b"), "/a+b");    // '+' is a space only in form-encoded queries
  EXPECT_EQ(percent_decode_path("/caf%C3%A9"), "/caf\xc3\xa9");
  EXPECT_EQ(percent_decode_path(""), "");
}

TEST(PercentDecodePath, RefusesBrokenEscapesAndNul) {
  for (const char* bad : {"/a%", "/a%2", "/a%g0", "/a%0g", "/%%41", "/a%00b"})
    EXPECT_EQ(percent_decode_path(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace orchid::server
