// Vocabulary tensors stored as their distinct rows: the form orchid's shipped tiny models keep in the
// repository (tools/train/pack.py). A model trained on a small part of the 201,088-token vocabulary has every
// unused row of its embedding and lm_head equal, so `NAME` [vocab, hidden] is stored as `NAME.used_ids` (I32
// [n]), `NAME.used_rows` ([n, hidden]) and `NAME.fill` ([hidden], every other row). Loading rebuilds `NAME`
// in memory; the rest of the checkpoint stays mapped as it is.
#pragma once

#include "io/checkpoint.h"
#include "model/manifest.h"

namespace orchid::model {

// Adds every manifest tensor the checkpoint holds only in packed form. Errors name the tensor and the file.
void expand_packed_rows(io::Checkpoint& ck, const std::vector<TensorSpec>& manifest);

}  // namespace orchid::model
