// The chat page's routes without a network: which paths are the page's, that the embedded files are the
// repository's assets/chat byte for byte, and revalidation (ETag, If-None-Match, 304).
#include "server/chat_page.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/api_error.h"

namespace orchid::server {
namespace {

HttpRequest get(std::string path, std::string if_none_match = "") {
  HttpRequest r;
  r.method = "GET";
  r.path = std::move(path);
  if (!if_none_match.empty()) r.headers.emplace_back("if-none-match", std::move(if_none_match));
  return r;
}

std::string header(const HttpResponse& r, std::string_view name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

std::string read_asset(std::string_view name) {
  std::ifstream in(std::filesystem::path(ORCHID_SOURCE_DIR) / "assets" / "chat" / name, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ChatPage, EmbedsEveryFileOfAssetsChat) {
  size_t on_disk = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(ORCHID_SOURCE_DIR) / "assets" / "chat"))
    on_disk += e.is_regular_file();
  ASSERT_EQ(chat_page_files().size(), on_disk);
  for (const EmbeddedFile& f : chat_page_files()) {
    const std::string on_disk_bytes = read_asset(f.name);
    // Not EXPECT_EQ: a stale copy would print both files whole.
    EXPECT_TRUE(f.bytes == on_disk_bytes) << f.name << ": " << f.bytes.size() << " bytes embedded, "
                                          << on_disk_bytes.size() << " in assets/chat";
    EXPECT_EQ(f.sha256.size(), 64u) << f.name;
  }
}

TEST(ChatPage, ServesTheIndexAtTheRootAndTheFilesUnderChat) {
  const std::string index = read_asset("index.html");
  for (const char* path : {"/", "/chat", "/chat/", "/chat/index.html"}) {
    std::optional<HttpResponse> r = chat_page_response(get(path));
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, index) << path;
    EXPECT_EQ(r->content_type, "text/html; charset=utf-8");
  }
  EXPECT_EQ(chat_page_response(get("/chat/chat.js"))->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(chat_page_response(get("/chat/chat.css"))->content_type, "text/css; charset=utf-8");
  for (const char* other : {"/v1/models", "/health", "/chat/none.js", "/chatty", "/chat/../index.html", "//"})
    EXPECT_FALSE(chat_page_response(get(other))) << other;
}

TEST(ChatPage, OtherMethodsAre405) {
  HttpRequest r = get("/");
  r.method = "POST";
  try {
    chat_page_response(r);
    FAIL() << "POST / was answered";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 405);
  }
}

TEST(ChatPage, RevalidatesWithTheEtag) {
  const HttpResponse first = *chat_page_response(get("/chat/chat.js"));
  const std::string etag = header(first, "ETag");
  ASSERT_FALSE(etag.empty());
  EXPECT_EQ(header(first, "Cache-Control"), "no-cache");
  for (const std::string& tags :
       {etag, "W/" + etag, "\"a\", " + etag, "\"a\" ,\t" + etag + " ", std::string("*")}) {
    const HttpResponse r = *chat_page_response(get("/chat/chat.js", tags));
    EXPECT_EQ(r.status, 304) << tags;
    EXPECT_TRUE(r.body.empty());
    EXPECT_EQ(header(r, "ETag"), etag);
  }
  for (const std::string& tags :
       {std::string("\"a\""), etag.substr(1), header(*chat_page_response(get("/")), "ETag")})
    EXPECT_EQ(chat_page_response(get("/chat/chat.js", tags))->status, 200) << tags;
}

}  // namespace
}  // namespace orchid::server
