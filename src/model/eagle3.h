// EAGLE-3 draft heads in the layout of the public gpt-oss heads (`LlamaForCausalLMEagle3`): one Llama
// decoder layer that reads three of the target's hidden states and proposes the next tokens.
//
// One draft step at position p (the math every backend implements):
//   g      = fc(concat(a_1, a_2, a_3))       a_i: the target's hidden state at p at aux layer i, where aux id
//                                            k is the input of target layer k (0: the embedding output,
//                                            num_layers: the last layer's output, before the final norm);
//                                            with norm_before_fc, RMSNorm(concat; input_norm) first
//   e      = RMSNorm(embed(token[p + 1]); input_layernorm)   the target's embedding unless the head has one
//   x      = concat(e, RMSNorm(g; hidden_norm))              2H wide, embedding first
//   attn   = o_proj(causal attention of q/k/v_proj(x), RoPE at p, over the head's own K/V of 0..p)
//   r      = attn + (norm_before_residual ? RMSNorm(g; hidden_norm) : g)
//   pre    = r + down(silu(gate(RMSNorm(r))) * up(RMSNorm(r)))    post_attention_layernorm
//   draft  = d2t-mapped arg-max of lm_head(RMSNorm(pre; norm))   draft id j is target id j + d2t[j]
// The first step of a run takes g from the target; each further step feeds its own `pre` back as g (no fc)
// with the token it just drafted, one position on.
//
// Checkpoint: config.json (architectures LlamaForCausalLMEagle3; the aux ids from
// eagle_aux_hidden_state_layer_ids, top level or under eagle_config, else vLLM's default (2, L/2, L-3)),
// tensors fc.weight, {midlayer.|layers.0.}{input_layernorm, hidden_norm, self_attn.{q,k,v,o}_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj}.weight, norm.weight, lm_head.weight, d2t (int64),
// optionally t2d (unused), embed_tokens.weight and input_norm.weight; any of them may carry a `model.`
// prefix. `synthetic[@seed]` makes a random head shaped for the target (tests, cost measurements).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/config.h"
#include "model/manifest.h"

namespace orchid::model {

struct Eagle3Config {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t vocab_size = 0;        // the target's
  int64_t draft_vocab_size = 0;  // rows of lm_head
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  RopeConfig rope;                  // plain RoPE (theta 10000) unless the config says otherwise
  std::vector<int64_t> aux_layers;  // three target states, in the order fc reads them
  bool norm_before_residual = false;
  bool norm_before_fc = false;  // input_norm.weight over the 3H concat
  bool has_embedding = false;   // embed_tokens.weight of its own (else the target's)

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
};

// The head's tensors by what they are (the checkpoint's names resolved).
struct Eagle3Tensors {
  std::string fc, input_norm_fc, embedding, input_layernorm, hidden_norm, q, k, v, o, post_norm, gate, up,
      down, final_norm, lm_head, d2t;
};

struct Eagle3Head {
  Eagle3Config config;
  io::Checkpoint checkpoint;
  Eagle3Tensors names;
  std::vector<int64_t> draft_to_target;  // d2t applied: target id of each draft id
};

// Parses a head's config.json text for `target` (checks that it fits: hidden size, vocabulary, aux ids).
Eagle3Config parse_eagle3_config(const std::string& text, const std::string& source,
                                 const ModelConfig& target);
// vLLM's aux ids when a config names none: (2, L/2, L-3) for L target layers (small models: distinct ids
// in [1, L - 1]).
std::vector<int64_t> default_eagle3_aux_layers(int64_t num_target_layers);
// A random head's shape for `target`: the target's attention heads, twice its width as the MLP, a draft
// vocabulary of min(32000, vocabulary) ids.
Eagle3Config synthetic_eagle3_config(const ModelConfig& target);

// A head directory or `synthetic[@seed]`, checked against `target`; errors name the file and tensor.
Eagle3Head load_eagle3_head(const std::string& arg, const ModelConfig& target);

}  // namespace orchid::model
