// CORS answers for any origin ("*"), for a list of origins (echoed, with Vary), and for none.
#include "server/cors.h"

#include <gtest/gtest.h>

namespace orchid::server {
namespace {

std::string header(const HttpResponse& r, std::string_view name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "<absent>";
}

HttpRequest from(std::string origin, std::string asked_headers = {}) {
  HttpRequest r;
  r.method = "OPTIONS";
  r.path = "/v1/chat/completions";
  r.headers = {{"origin", std::move(origin)}};
  if (!asked_headers.empty()) r.headers.emplace_back("access-control-request-headers", asked_headers);
  return r;
}

TEST(Cors, AnyOriginGetsAStarAndAFullPreflight) {
  const Cors cors({"*"});
  const HttpResponse p = cors.preflight(from("http://a.example", "authorization, x-stainless-os"));
  EXPECT_EQ(p.status, 204);
  EXPECT_TRUE(p.body.empty());
  EXPECT_EQ(header(p, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(p, "Access-Control-Allow-Headers"), "authorization, x-stainless-os");
  EXPECT_NE(header(p, "Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_NE(header(p, "Access-Control-Max-Age"), "<absent>");
  HttpResponse r;
  cors.add_headers(from(""), &r);  // no Origin (curl, the SDKs): the header does no harm
  EXPECT_EQ(header(r, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(r, "Vary"), "<absent>");
}

TEST(Cors, ListedOriginsAreEchoedOthersGetNothing) {
  const Cors cors({"https://a.example", "https://b.example"});
  HttpResponse ok;
  cors.add_headers(from("https://b.example"), &ok);
  EXPECT_EQ(header(ok, "Access-Control-Allow-Origin"), "https://b.example");
  EXPECT_EQ(header(ok, "Vary"), "Origin");
  HttpResponse other;
  cors.add_headers(from("https://evil.example"), &other);
  EXPECT_TRUE(other.headers.empty());
  const HttpResponse p = cors.preflight(from("https://evil.example"));
  EXPECT_EQ(p.status, 204);
  EXPECT_EQ(header(p, "Access-Control-Allow-Origin"), "<absent>");
  EXPECT_EQ(header(p, "Access-Control-Allow-Methods"), "<absent>");
}

TEST(Cors, NoOriginsMeansNoCrossOriginAccess) {
  const Cors cors({});
  HttpResponse r;
  cors.add_headers(from("https://a.example"), &r);
  EXPECT_TRUE(r.headers.empty());
}

}  // namespace
}  // namespace orchid::server
