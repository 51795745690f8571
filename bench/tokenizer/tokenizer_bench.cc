// Tokenizer throughput on the committed corpus (tests/data/tokenizer_corpus.jsonl), one thread, each document
// encoded on its own as tiktoken is timed by compare_tiktoken.py. Also times the pre-tokenizer alone against
// PCRE2 (JIT, UTF + UCP) running the same regex, the reason orchid has its own scanner.
//   build/cpu/bench/tokenizer/tokenizer_bench [--corpus FILE] [benchmark flags]
#define PCRE2_CODE_UNIT_WIDTH 8
#include <benchmark/benchmark.h>
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using orchid::tokenizer::Tokenizer;

std::string g_corpus_path = ORCHID_SOURCE_DIR "/tests/data/tokenizer_corpus.jsonl";

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = [] {
    std::ifstream f(g_corpus_path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open corpus " + g_corpus_path);
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);) {
      if (!line.empty()) out.push_back(nlohmann::json::parse(line).get<std::string>());
    }
    return out;
  }();
  return docs;
}

int64_t corpus_bytes() {
  int64_t n = 0;
  for (const auto& d : corpus()) n += static_cast<int64_t>(d.size());
  return n;
}

void BM_EncodeOrdinary(benchmark::State& state) {
  auto tok = Tokenizer::builtin();
  const auto& docs = corpus();
  int64_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (const auto& d : docs) {
      auto ids = tok->encode_ordinary(d);
      tokens += static_cast<int64_t>(ids.size());
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(state.iterations() * corpus_bytes());
  state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_EncodeOrdinary)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_Decode(benchmark::State& state) {
  auto tok = Tokenizer::builtin();
  std::vector<std::vector<int32_t>> ids;
  for (const auto& d : corpus()) ids.push_back(tok->encode_ordinary(d));
  for (auto _ : state) {
    for (const auto& v : ids) benchmark::DoNotOptimize(tok->decode(v));
  }
  state.SetBytesProcessed(state.iterations() * corpus_bytes());
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

void BM_IncrementalDetokenize(benchmark::State& state) {
  auto tok = Tokenizer::builtin();
  std::vector<std::vector<int32_t>> ids;
  for (const auto& d : corpus()) ids.push_back(tok->encode_ordinary(d));
  for (auto _ : state) {
    for (const auto& v : ids) {
      orchid::tokenizer::IncrementalDetokenizer detok(*tok);
      for (int32_t id : v) benchmark::DoNotOptimize(detok.push(id));
      benchmark::DoNotOptimize(detok.flush());
    }
  }
  state.SetBytesProcessed(state.iterations() * corpus_bytes());
}
BENCHMARK(BM_IncrementalDetokenize)->Unit(benchmark::kMillisecond);

void BM_PretokenizeScanner(benchmark::State& state) {
  const auto& docs = corpus();
  for (auto _ : state) {
    size_t pieces = 0;
    for (const auto& d : docs) {
      for (size_t p = 0; p < d.size(); p = orchid::tokenizer::o200k_piece_end(d, p)) ++pieces;
    }
    benchmark::DoNotOptimize(pieces);
  }
  state.SetBytesProcessed(state.iterations() * corpus_bytes());
}
BENCHMARK(BM_PretokenizeScanner)->Unit(benchmark::kMillisecond);

void BM_PretokenizePcre2Jit(benchmark::State& state) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const std::string_view pat = orchid::tokenizer::kO200kPattern;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), PCRE2_UTF | PCRE2_UCP,
                                 &err, &err_offset, nullptr);
  if (re == nullptr || pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0) {
    state.SkipWithError("PCRE2 JIT compile failed");
    return;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  const auto& docs = corpus();
  for (auto _ : state) {
    size_t pieces = 0;
    for (const auto& d : docs) {
      auto* s = reinterpret_cast<PCRE2_SPTR>(d.data());
      for (size_t p = 0; p < d.size();) {
        if (pcre2_jit_match(re, s, d.size(), p, 0, md, nullptr) < 0) break;
        p = pcre2_get_ovector_pointer(md)[1];
        ++pieces;
      }
    }
    benchmark::DoNotOptimize(pieces);
  }
  state.SetBytesProcessed(state.iterations() * corpus_bytes());
  pcre2_match_data_free(md);
  pcre2_code_free(re);
}
BENCHMARK(BM_PretokenizePcre2Jit)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--corpus") == 0 && i + 1 < argc) {
      g_corpus_path = argv[++i];
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
