// Placeholder: greedy only, until the full sampler lands with the engine.
#include "runtime/sampler.h"

#include <cmath>

#include "core/error.h"

namespace orchid::runtime {

SampledToken sample_token(const SampleInput& in) {
  ORCHID_CHECK(!in.logits.empty());
  SampledToken out;
  int32_t best = 0;
  for (int32_t i = 1; i < int32_t(in.logits.size()); ++i)
    if (in.logits[i] > in.logits[best]) best = i;
  out.token = best;
  double mx = in.logits[best], sum = 0;
  for (float v : in.logits) sum += std::exp(double(v) - mx);
  out.logprob = float(-std::log(sum));
  return out;
}

}  // namespace orchid::runtime
