#include "core/parse.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace orchid {
namespace {

TEST(Parse, IntLists) {
  EXPECT_EQ(parse_int_list("1,2, 3", "--ids"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(parse_int_list("[4, 5]", "--ids"), (std::vector<int64_t>{4, 5}));
  EXPECT_TRUE(parse_int_list("", "--ids").empty());
  EXPECT_THROW(parse_int_list("1,,2", "--ids"), Error);
  EXPECT_THROW(parse_int_list("1,x", "--ids"), Error);
  EXPECT_THROW(parse_int_list("99999999999999999999", "--ids"), Error);
  try {
    parse_int_list("1,a", "--ids");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--ids"), std::string::npos);
  }
}

TEST(Parse, Numbers) {
  EXPECT_EQ(parse_int(" 42 ", "n"), 42);
  EXPECT_DOUBLE_EQ(parse_double("0.5", "t"), 0.5);
  EXPECT_THROW(parse_double("0.5x", "t"), Error);
  EXPECT_THROW(parse_double("", "t"), Error);
  EXPECT_THROW(parse_int("1.5", "n"), Error);
}

TEST(Check, ThrowsInternalErrorWithLocation) {
  try {
    ORCHID_CHECK(1 + 1 == 3, "math is {}", "broken");
    FAIL();
  } catch (const InternalError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("parse_test.cc"), std::string::npos);
    EXPECT_NE(w.find("math is broken"), std::string::npos);
  }
}

}  // namespace
}  // namespace orchid
