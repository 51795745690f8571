#include "tokenizer/hf_tokenizer_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/parse.h"
#include "same_tokenizer.h"
#include "test_data.h"
#include "tokenizer/tokenizer.h"

namespace orchid::tokenizer {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("orchid_hf_tokenizer_" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// Big texts: report where they first differ instead of printing both.
void expect_same_text(const std::string& ours, const std::string& theirs, const std::string& what) {
  if (ours == theirs) return;
  size_t k = 0;
  while (k < ours.size() && k < theirs.size() && ours[k] == theirs[k]) ++k;
  ADD_FAILURE() << what << " differs at byte " << k << " of " << ours.size() << " (published "
                << theirs.size() << "): ours '" << ours.substr(k > 40 ? k - 40 : 0, 80) << "' published '"
                << theirs.substr(k > 40 ? k - 40 : 0, 80) << "'";
}

TEST(HfTokenizerFiles, ModelDirectoryGivesTheBuiltinTokenizer) {
  TempDir dir;
  write_hf_tokenizer_files(dir.str(), builtin_vocabulary());
  auto builtin = Tokenizer::builtin();
  auto from_dir = Tokenizer::for_model(dir.str());
  ASSERT_NE(from_dir.get(), builtin.get()) << "the directory's tokenizer.json must be the one read";
  testing::expect_same_tokenizer(*builtin, *from_dir, /*stride=*/1);
  const std::unordered_set<std::string> all = builtin->special_literals();
  for (const std::string& doc : testing::corpus()) {
    if (doc.find("<|") != std::string::npos) {
      ASSERT_EQ(builtin->encode(doc, all), from_dir->encode(doc, all));
    }
  }
}

// Checked with a plain hash map of token bytes, independent of the writer's RankMap. Valid merges, ranks that
// never decrease, strictly increasing (left, right) within a rank and the right count per rank together say
// that the list is every split, each once, in the published order.
TEST(HfTokenizerFiles, MergesAreEverySplitInRankOrder) {
  const Vocabulary v = builtin_vocabulary();
  std::unordered_map<std::string_view, int32_t> rank_of;
  for (int32_t r = 0; r < v.rank_count(); ++r) rank_of.emplace(v.token(r), r);
  std::vector<int32_t> splits(v.rank_count(), 0);  // per rank: the ways to write it as two tokens
  size_t total = 0;
  for (int32_t r = 0; r < v.rank_count(); ++r) {
    const std::string_view t = v.token(r);
    for (size_t i = 1; i < t.size(); ++i)
      splits[r] += rank_of.count(t.substr(0, i)) && rank_of.count(t.substr(i));
    total += splits[r];
    if (t.size() > 1) {
      ASSERT_GT(splits[r], 0) << "rank " << r << " cannot be built by merges";
    }
  }

  const std::vector<Merge> merges = bpe_merges(v);
  ASSERT_EQ(merges.size(), total);
  std::vector<int32_t> seen(v.rank_count(), 0);
  int32_t previous = -1;
  for (size_t i = 0; i < merges.size(); ++i) {
    const Merge m = merges[i];
    ASSERT_TRUE(m.left >= 0 && m.left < v.rank_count() && m.right >= 0 && m.right < v.rank_count()) << i;
    const std::string joined = std::string(v.token(m.left)) + std::string(v.token(m.right));
    auto it = rank_of.find(joined);
    ASSERT_NE(it, rank_of.end()) << "merge " << i << " makes no token";
    const int32_t rank = it->second;
    ASSERT_GE(rank, previous) << "merge " << i << " goes back to an earlier rank";
    if (rank == previous) {
      const Merge p = merges[i - 1];
      ASSERT_TRUE(p.left < m.left || (p.left == m.left && p.right < m.right))
          << "merge " << i << " out of order";
    }
    ++seen[rank];
    previous = rank;
  }
  EXPECT_EQ(seen, splits);
}

TEST(HfTokenizerFiles, AddedTokensEndAtTheLastNamedSpecial) {
  const Vocabulary v = builtin_vocabulary();
  const std::vector<SpecialToken> added = hf_added_tokens(v);
  ASSERT_FALSE(added.empty());
  EXPECT_EQ(added.front().id, v.specials.front().id);
  for (size_t i = 1; i < added.size(); ++i) EXPECT_EQ(added[i].id, added[i - 1].id + 1);
  EXPECT_EQ(added.back().literal.rfind("<|reserved_", 0), std::string::npos) << added.back().literal;
  for (const SpecialToken& t : v.specials) {
    if (t.id > added.back().id) {
      EXPECT_EQ(t.literal.rfind("<|reserved_", 0), 0u) << t.literal;
    }
  }
}

// The published files were made by transformers' tiktoken converter and saved by tokenizers and transformers;
// the writer reproduces them byte for byte from the built-in vocabulary.
TEST(HfTokenizerFiles, FilesEqualThePublishedOnes) {
  const std::string fixtures = testing::fixture_dir();
  if (fixtures.empty())
    GTEST_SKIP() << "gpt-oss tokenizer fixtures (shared/fixtures/gpt-oss-tokenizer) not found";
  const Vocabulary v = builtin_vocabulary();
  expect_same_text(hf_tokenizer_json(v), read_text_file(fixtures + "/tokenizer.json", "fixture"),
                   "tokenizer.json");
  expect_same_text(hf_tokenizer_config_json(v),
                   read_text_file(fixtures + "/tokenizer_config.json", "fixture"), "tokenizer_config.json");
}

TEST(HfTokenizerFiles, UnwritableDirectoryIsAUserError) {
  EXPECT_THROW(write_hf_tokenizer_files("/no/such/dir", builtin_vocabulary()), Error);
}

}  // namespace
}  // namespace orchid::tokenizer
