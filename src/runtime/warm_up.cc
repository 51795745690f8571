#include "runtime/warm_up.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "runtime/sequence_runner.h"

namespace orchid::runtime {

double warm_up(Backend& backend) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t vocab = backend.model_config().vocab_size;
  // A prompt of ordinary token ids (the step shapes matter, not the values), short enough for any cache.
  const int32_t prompt = std::min<int32_t>(128, backend.max_step_tokens());
  std::vector<int32_t> ids(size_t(prompt), 0);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % size_t(std::min(vocab, 200000)));
  for (const float temperature : {0.0f, 1.0f}) {  // arg-max and the GPU sampler: separate graphs
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 1;
    SequenceRunner runner(backend, params);
    StepOutput out = runner.feed(ids, true);
    // The first decode step of a batch size runs eagerly, the second is captured, the third replays.
    for (int step = 0; step < 3 && !out.samples.empty(); ++step)
      out = runner.feed({out.samples[0].token}, true);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace orchid::runtime
