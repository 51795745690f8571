// QKV bias + YaRN RoPE + paged KV write against the fp32 reference (attention_reference.h) on random rows:
// bias none / bf16 / fp32, page sizes 16..128, positions up to 131071, padding tokens, a page marked kNoPage
// (its tokens' K/V must be skipped). Every element of q_out and of both pools is checked: written ones
// against the reference, all others still holding the poison pattern. The fp32 mode of precise layers
// likewise, with q rotated in place. The FP8 KV cache: K and V as e4m3(x / scale) of the fp32 result, per
// KV head scales, compared byte for byte (one e4m3 step allowed where cos/sin rounding moves x).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention/attention_plan.h"
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/rope_kv_write.h"
#include "kernels/attention/yarn.h"
#include "model/config.h"
#include "tests/kernels/attention/attention_reference.h"
#include "tests/kernels/attention/paged_step.h"
#include "tests/kernels/gpu_test_util.h"

namespace orchid::kernels::attention {
namespace {

using orchid::testing::DeviceBuffer;
using orchid::testing::kPoisonBf16;
using orchid::testing::kPoisonFp8;

enum class Bias { kNone, kBf16, kFp32 };

struct RopeCase {
  int hq = 64, hkv = 8, page_size = 16;
  TableKind kind = kFullTable;
  Bias bias = Bias::kBf16;
  std::vector<std::pair<int, int>> seqs;  // (num_q, start_pos)
  int extra_tokens = 0;
  bool drop_a_page = false;  // mark one page holding new tokens kNoPage
  bool fp8 = false;          // e4m3 pools with per-head scales
};

// Signed-magnitude e4m3 bits -> a monotonic integer (steps between neighbouring values).
int ordered_e4m3(uint8_t b) {
  return (b & 0x80) ? -int(b & 0x7f) : int(b);
}

// Signed-magnitude bf16 bits -> a monotonic integer, so that |a - b| counts ulps (across zero too).
int ordered(uint16_t b) {
  return (b & 0x8000) ? -int(b & 0x7fff) : int(b);
}

struct UlpCheck {
  size_t compared = 0, off_by_one = 0, bad = 0;
  int64_t first_bad = -1;
  std::string first_text;
  void add(size_t i, uint16_t got, uint16_t want, const std::string& where_if_bad) {
    ++compared;
    const bool nan = (got & 0x7fff) > 0x7f80;
    const int d = std::abs(ordered(got) - ordered(want));
    if (nan || d > 1) {
      if (bad++ == 0) {
        first_bad = int64_t(i);
        std::ostringstream s;
        s << where_if_bad << " got 0x" << std::hex << got << " (" << bf16_to_float(got) << ") want 0x" << want
          << " (" << bf16_to_float(want) << ")";
        first_text = s.str();
      }
    } else if (d == 1) {
      ++off_by_one;
    }
  }
  std::string summary() const {
    std::ostringstream s;
    s << "compared " << compared << ": " << bad << " differ by > 1 bf16 ulp or NaN, " << off_by_one
      << " by 1 ulp";
    if (bad) s << "; first #" << first_bad << " " << first_text;
    return s.str();
  }
};

void run_case(const RopeCase& rc, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int hq = rc.hq, hkv = rc.hkv, ps = rc.page_size;
  const int width = (hq + 2 * hkv) * 64;
  model::ModelConfig cfg = model::preset_config("20b");
  cfg.head_dim = 64;
  const RopeFrequencies freqs = yarn_inv_freq(cfg);

  const PagedStep step = make_paged_step(rc.seqs, rc.page_size, rc.kind, rc.drop_a_page, rng);
  const std::vector<PlanSequence>& seqs = step.seqs;
  const std::vector<int32_t>& table = step.table;
  const int num_pages = step.num_pages, num_tokens = step.num_tokens;
  const int token_rows = num_tokens + rc.extra_tokens;

  const std::vector<uint16_t> qkv = orchid::testing::random_bf16(rng, size_t(token_rows) * width, 1.0f);
  std::vector<float> bias_f(size_t(width), 0.0f);
  std::vector<uint16_t> bias_bf16(static_cast<size_t>(width));
  std::normal_distribution<float> bd(0.0f, 0.5f);
  for (int i = 0; i < width; ++i) {
    bias_bf16[size_t(i)] = float_to_bf16(bd(rng));
    bias_f[size_t(i)] = rc.bias == Bias::kFp32 ? bd(rng) : bf16_to_float(bias_bf16[size_t(i)]);
  }

  const AttentionPlanBuilder plan = plan_step(step, hq, hkv, token_rows);

  const size_t pool_elems = kv_pool_elements(num_pages, hkv, ps);
  DeviceBuffer<uint16_t> d_qkv(qkv), d_bias16(bias_bf16);
  DeviceBuffer<float> d_biasf(bias_f);
  DeviceBuffer<uint16_t> d_q(std::vector<uint16_t>(size_t(token_rows) * hq * 64, kPoisonBf16));
  DeviceBuffer<uint16_t> d_k(std::vector<uint16_t>(pool_elems, kPoisonBf16));
  DeviceBuffer<uint16_t> d_v(std::vector<uint16_t>(pool_elems, kPoisonBf16));
  DeviceBuffer<uint8_t> d_k8(std::vector<uint8_t>(pool_elems, kPoisonFp8));
  DeviceBuffer<uint8_t> d_v8(std::vector<uint8_t>(pool_elems, kPoisonFp8));
  std::vector<float> k_scale, v_scale;
  std::uniform_real_distribution<float> scale(0.2f, 2.0f);  // 1 / scale widens |x| ~ 1 towards 448 too
  for (int h = 0; h < hkv; ++h) k_scale.push_back(scale(rng)), v_scale.push_back(scale(rng));
  DeviceBuffer<float> d_k_scale(k_scale), d_v_scale(v_scale);
  DeviceBuffer<int32_t> d_table(table), d_blob(plan.blob());

  RopeKvWriteArgs a;
  a.qkv = reinterpret_cast<const __nv_bfloat16*>(d_qkv.get());
  a.bias = rc.bias == Bias::kNone   ? nullptr
           : rc.bias == Bias::kFp32 ? static_cast<const void*>(d_biasf.get())
                                    : static_cast<const void*>(d_bias16.get());
  a.bias_fp32 = rc.bias == Bias::kFp32;
  std::copy(freqs.inv_freq.begin(), freqs.inv_freq.end(), a.rope.inv_freq);
  a.rope.concentration = freqs.concentration;
  a.q_out = reinterpret_cast<__nv_bfloat16*>(d_q.get());
  a.k_pool = rc.fp8 ? static_cast<void*>(d_k8.get()) : static_cast<void*>(d_k.get());
  a.v_pool = rc.fp8 ? static_cast<void*>(d_v8.get()) : static_cast<void*>(d_v.get());
  a.kv_fp8 = rc.fp8;
  a.k_scale = rc.fp8 ? d_k_scale.get() : nullptr;
  a.v_scale = rc.fp8 ? d_v_scale.get() : nullptr;
  a.page_table = d_table.get();
  a.table_kind = rc.kind;
  a.page_size = ps;
  rope_kv_write(a, plan.device_view(d_blob.get()), nullptr);
  ORCHID_CUDA_CHECK(cudaGetLastError());
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());

  // Expected images: poison everywhere except what the reference writes.
  std::vector<uint16_t> q_want(size_t(token_rows) * hq * 64, kPoisonBf16);
  std::vector<uint16_t> k_want(pool_elems, kPoisonBf16), v_want(pool_elems, kPoisonBf16);
  std::vector<uint8_t> k8_want(pool_elems, kPoisonFp8), v8_want(pool_elems, kPoisonFp8);
  const std::vector<float> xf = orchid::testing::bf16_to_floats(qkv);
  std::vector<uint16_t> kr(size_t(hkv) * 64), vr(size_t(hkv) * 64);
  std::vector<float> qf(size_t(hq) * 64), kf(size_t(hkv) * 64), vf(size_t(hkv) * 64);
  for (const PlanSequence& s : seqs) {
    for (int i = 0; i < s.num_q; ++i) {
      const int t = s.q_start + i, pos = s.start_pos + i;
      reference::qkv_rope_row(&xf[size_t(t) * width], rc.bias == Bias::kNone ? nullptr : bias_f.data(), pos,
                              freqs, hq, hkv, &q_want[size_t(t) * hq * 64], kr.data(), vr.data());
      if (rc.fp8)
        reference::qkv_rope_row_f32(&xf[size_t(t) * width], rc.bias == Bias::kNone ? nullptr : bias_f.data(),
                                    pos, freqs, hq, hkv, qf.data(), kf.data(), vf.data());
      const int row = rc.kind == kFullTable ? s.full_table_begin : s.sliding_table_begin;
      const int32_t page = table[size_t(row + pos / ps)];
      if (page < 0) continue;
      for (int h = 0; h < hkv; ++h)
        for (int d = 0; d < 64; ++d) {
          const size_t at = ((size_t(page) * hkv + h) * ps + size_t(pos % ps)) * 64 + d;
          if (rc.fp8) {
            k8_want[at] = float_to_fp8e4m3(kf[size_t(h) * 64 + d] / k_scale[size_t(h)]);
            v8_want[at] = float_to_fp8e4m3(vf[size_t(h) * 64 + d] / v_scale[size_t(h)]);
          } else {
            k_want[at] = kr[size_t(h) * 64 + d];
            v_want[at] = vr[size_t(h) * 64 + d];
          }
        }
    }
  }
  std::ostringstream name;
  name << (rc.fp8 ? "fp8 kv, " : "") << "hq " << hq << " hkv " << hkv << " page " << ps << " bias "
       << int(rc.bias) << " tokens " << token_rows;
  auto check = [&](const char* what, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                   size_t row_elems) {
    UlpCheck c;
    size_t untouched_bad = 0;
    int64_t first_untouched = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      if (want[i] == kPoisonBf16) {
        if (got[i] != kPoisonBf16 && untouched_bad++ == 0) first_untouched = int64_t(i);
        continue;
      }
      std::ostringstream w;
      w << what << " row " << i / row_elems << " elem " << i % row_elems;
      c.add(i, got[i], want[i], c.bad == 0 ? w.str() : std::string());
    }
    // The only expected differences come from cos/sin rounding (device sincospi vs host cos, each within an
    // fp32 ulp): at most one bf16 ulp, on a small fraction of the elements.
    EXPECT_EQ(c.bad, 0u) << name.str() << " " << what << ": " << c.summary();
    EXPECT_LE(double(c.off_by_one), 1e-3 * double(c.compared) + 2)
        << name.str() << " " << what << ": " << c.summary();
    EXPECT_EQ(untouched_bad, 0u) << name.str() << " " << what
                                 << ": elements written that should not be, first #" << first_untouched;
    std::printf("    %s %s: %s, %zu stray writes\n", name.str().c_str(), what, c.summary().c_str(),
                untouched_bad);
  };
  check("q", d_q.download(), q_want, size_t(hq) * 64);
  if (!rc.fp8) {
    check("k_pool", d_k.download(), k_want, 64);
    check("v_pool", d_v.download(), v_want, 64);
    return;
  }
  // e4m3 pools: one e4m3 step where x / scale sits at a rounding boundary that the cos/sin ulp crosses
  // (rarer than for bf16: e4m3 steps are 16x coarser); nothing written outside the new tokens' rows.
  auto check8 = [&](const char* what, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
    size_t compared = 0, off_by_one = 0, bad = 0, stray = 0;
    int64_t first_bad = -1;
    for (size_t i = 0; i < got.size(); ++i) {
      if (want[i] == kPoisonFp8) {
        stray += got[i] != kPoisonFp8;
        continue;
      }
      ++compared;
      const int d = std::abs(ordered_e4m3(got[i]) - ordered_e4m3(want[i]));
      if ((got[i] & 0x7f) == 0x7f || d > 1) {
        if (bad++ == 0) first_bad = int64_t(i);
      } else if (d == 1) {
        ++off_by_one;
      }
    }
    EXPECT_EQ(bad, 0u) << name.str() << " " << what << ": first at element " << first_bad;
    EXPECT_LE(double(off_by_one), 1e-3 * double(compared) + 2) << name.str() << " " << what;
    EXPECT_EQ(stray, 0u) << name.str() << " " << what << ": elements written that should not be";
    std::printf("    %s %s: %zu compared, %zu differ by > 1 e4m3 step or NaN, %zu by one, %zu stray\n",
                name.str().c_str(), what, compared, bad, off_by_one, stray);
  };
  check8("k_pool (e4m3)", d_k8.download(), k8_want);
  check8("v_pool (e4m3)", d_v8.download(), v8_want);
}

// fp32 mode (precise layers): fp32 qkv rows with an fp32 bias, q rotated in place inside the qkv buffer
// (q_stride = row width), fp32 pools. Values agree with the fp32 reference up to the cos/sin ulp; elements
// nobody should write keep their contents (NaN in the pools, the input in the k/v columns and padding rows).
void run_fp32_case(const RopeCase& rc, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int hq = rc.hq, hkv = rc.hkv, ps = rc.page_size;
  const int width = (hq + 2 * hkv) * 64;
  model::ModelConfig cfg = model::preset_config("20b");
  const RopeFrequencies freqs = yarn_inv_freq(cfg);
  const PagedStep step = make_paged_step(rc.seqs, rc.page_size, rc.kind, rc.drop_a_page, rng);
  const std::vector<PlanSequence>& seqs = step.seqs;
  const std::vector<int32_t>& table = step.table;
  const int num_pages = step.num_pages, cursor = step.num_tokens;
  const int token_rows = cursor + rc.extra_tokens;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> qkv(size_t(token_rows) * width), bias(static_cast<size_t>(width));
  for (float& x : qkv) x = nd(rng);
  for (float& x : bias) x = 0.5f * nd(rng);
  const AttentionPlanBuilder plan = plan_step(step, hq, hkv, token_rows);
  const size_t pool_elems = kv_pool_elements(num_pages, hkv, ps);
  DeviceBuffer<float> d_qkv(qkv), d_bias(bias), d_k(std::vector<float>(pool_elems, NAN)),
      d_v(std::vector<float>(pool_elems, NAN));
  DeviceBuffer<int32_t> d_table(table), d_blob(plan.blob());
  RopeKvWriteArgs a;
  a.fp32 = true;
  a.qkv = d_qkv.get();
  a.bias = d_bias.get();
  a.bias_fp32 = true;
  std::copy(freqs.inv_freq.begin(), freqs.inv_freq.end(), a.rope.inv_freq);
  a.rope.concentration = freqs.concentration;
  a.q_out = d_qkv.get();
  a.q_stride = width;
  a.k_pool = d_k.get();
  a.v_pool = d_v.get();
  a.page_table = d_table.get();
  a.table_kind = rc.kind;
  a.page_size = ps;
  rope_kv_write(a, plan.device_view(d_blob.get()), nullptr);
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<float> qkv_want = qkv, k_want(pool_elems, NAN), v_want(pool_elems, NAN);
  std::vector<float> kr(size_t(hkv) * 64), vr(size_t(hkv) * 64);
  for (const PlanSequence& s : seqs) {
    for (int i = 0; i < s.num_q; ++i) {
      const int t = s.q_start + i, pos = s.start_pos + i;
      reference::qkv_rope_row_f32(&qkv[size_t(t) * width], bias.data(), pos, freqs, hq, hkv,
                                  &qkv_want[size_t(t) * width], kr.data(), vr.data());
      const int row = rc.kind == kFullTable ? s.full_table_begin : s.sliding_table_begin;
      const int32_t page = table[size_t(row + pos / ps)];
      for (int h = 0; h < hkv && page >= 0; ++h)
        for (int d = 0; d < 64; ++d) {
          const size_t at = ((size_t(page) * hkv + h) * ps + size_t(pos % ps)) * 64 + d;
          k_want[at] = kr[size_t(h) * 64 + d];
          v_want[at] = vr[size_t(h) * 64 + d];
        }
    }
  }
  auto check = [&](const char* what, const std::vector<float>& got, const std::vector<float>& want) {
    size_t bad = 0, compared = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(want[i])) {
        bad += !std::isnan(got[i]);
        continue;
      }
      ++compared;
      const double err = std::abs(double(got[i]) - double(want[i]));
      worst = std::max(worst, err);
      // a few fp32 ulps of the inputs (|x| < ~8; cos/sin within an ulp), never NaN
      bad += !(err <= 4e-7 * std::abs(double(want[i])) + 2e-6);
    }
    std::printf("    fp32 %s: %zu compared, %zu bad, worst abs error %.2e\n", what, compared, bad, worst);
    EXPECT_EQ(bad, 0u) << what;
  };
  check("qkv (q in place)", d_qkv.download(), qkv_want);
  check("k_pool", d_k.download(), k_want);
  check("v_pool", d_v.download(), v_want);
}

class RopeKvWrite : public ::testing::Test {
 protected:
  void SetUp() override { ORCHID_REQUIRE_GPU_OR_SKIP(); }
  uint64_t seed_ = orchid::testing::test_seed();
};

TEST_F(RopeKvWrite, SmallGptOssShapes) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  RopeCase rc;
  rc.seqs = {{37, 0}, {1, 4095}, {5, 100}, {0, 3}, {20, 131000}, {1, 131071}};
  rc.extra_tokens = 3;
  for (Bias b : {Bias::kNone, Bias::kBf16, Bias::kFp32}) {
    rc.bias = b;
    run_case(rc, seed_ + uint64_t(b));
  }
}

TEST_F(RopeKvWrite, SmallPageSizesAndDroppedPage) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  for (int ps : {16, 32, 64, 128}) {
    RopeCase rc;
    rc.page_size = ps;
    rc.kind = ps == 32 ? kSlidingTable : kFullTable;
    rc.drop_a_page = true;
    rc.seqs = {{70, 10}, {200, 1000}, {1, 64}};
    run_case(rc, seed_ + uint64_t(ps));
  }
}

TEST_F(RopeKvWrite, HeadCountsAndManyTokens) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  const std::pair<int, int> heads[] = {{8, 8}, {10, 2}, {64, 8}};
  uint64_t k = 0;
  for (auto [hq, hkv] : heads) {
    RopeCase rc;
    rc.hq = hq;
    rc.hkv = hkv;
    rc.bias = Bias::kFp32;
    rc.seqs = {{3000, 0}, {1000, 50000}};
    run_case(rc, seed_ + ++k);
  }
}

TEST_F(RopeKvWrite, Fp8Pools) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  RopeCase rc;
  rc.fp8 = true;
  rc.seqs = {{37, 0}, {1, 4095}, {5, 100}, {0, 3}, {20, 131000}, {1, 131071}};
  rc.extra_tokens = 3;
  for (Bias b : {Bias::kNone, Bias::kBf16, Bias::kFp32}) {
    rc.bias = b;
    run_case(rc, seed_ + uint64_t(b));
  }
  rc.page_size = 32;
  rc.kind = kSlidingTable;
  rc.drop_a_page = true;
  rc.hq = 10;
  rc.hkv = 2;
  rc.seqs = {{70, 10}, {200, 1000}, {1, 64}};
  run_case(rc, seed_ + 7);
}

TEST_F(RopeKvWrite, SmallFp32InPlace) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  RopeCase rc;
  rc.kind = kSlidingTable;
  rc.seqs = {{37, 0}, {1, 4095}, {5, 100}, {0, 3}, {20, 131000}};
  rc.extra_tokens = 3;
  run_fp32_case(rc, seed_);
  rc.hq = 10;
  rc.hkv = 2;
  rc.page_size = 64;
  rc.seqs = {{300, 7}, {1, 64}};
  run_fp32_case(rc, seed_ + 1);
}

TEST_F(RopeKvWrite, SmallEmpty) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  RopeCase rc;
  run_case(rc, seed_);  // no tokens: nothing launched, nothing written
  rc.extra_tokens = 4;  // padding tokens only
  run_case(rc, seed_ + 1);
}

}  // namespace
}  // namespace orchid::kernels::attention
