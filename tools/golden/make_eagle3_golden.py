#!/usr/bin/env python3
"""An EAGLE-3 head for the golden tiny checkpoint, and the drafts it makes, from transformers' hidden states.

The head is random (seeded) in the published layout of the gpt-oss heads (LlamaForCausalLMEagle3: fc,
midlayer.*, norm, lm_head over a draft vocabulary, d2t), BF16, with aux ids that include the target's last
layer output (id = num_layers, before the final norm). The target's states come from transformers' GptOss on
tests/golden/tiny/checkpoint in FP32 (forward pre-hooks: id k is the input of layer k); the head's draft
chain is computed here in FP32 torch, written plainly from the published math (model/eagle3.h describes the
same): rows pair fc(aux) at position p with the token at p + 1, causal attention over the head's own K/V,
Llama RoPE (theta 10000, rotate-half), SiLU MLP; the first draft from the last prompt row (its successor is
the target's greedy token), each further draft feeding back the layer's pre-norm output one position on.

Written to OUT (default tests/golden/eagle3_tiny):
  head/config.json, head/model.safetensors
  reference.json: per prompt its ids, the target's greedy next token, K drafts, and each draft's top-1/top-2
                  logit margin (a consumer compares drafts up to the first near-tie)

Usage: scripts/setup.sh --golden && .venv/bin/python tools/golden/make_eagle3_golden.py
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import GptOssForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.path.join(ROOT, "tests", "golden", "tiny", "checkpoint")
DRAFT_VOCAB = 512
INTER = 256
AUX = [1, 2, 4]  # 4 = the target's last layer output (it has 4 layers)
K = 5
THETA = 10000.0
EPS = 1e-5


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, pos, d):
    """Llama RoPE on [n, heads, d] at positions pos [n] (rotate-half pairs (j, j + d/2))."""
    inv = 1.0 / (THETA ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = (pos.double()[:, None] * inv[None, :]).float()
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Head:
    def __init__(self, t, cfg):
        self.t, self.c = t, cfg
        self.k_cache, self.v_cache = [], []  # per position [kv_heads, d]

    def layer(self, g, tokens, first_pos, embed):
        c, t = self.c, self.t
        n, H = g.shape
        heads, kvh, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        e = rms(embed[tokens], t["midlayer.input_layernorm.weight"])
        hn = rms(g, t["midlayer.hidden_norm.weight"])
        x = torch.cat([e, hn], dim=-1)
        pos = torch.arange(first_pos, first_pos + n)
        q = rope((x @ t["midlayer.self_attn.q_proj.weight"].T).view(n, heads, d), pos, d)
        k = rope((x @ t["midlayer.self_attn.k_proj.weight"].T).view(n, kvh, d), pos, d)
        v = (x @ t["midlayer.self_attn.v_proj.weight"].T).view(n, kvh, d)
        del self.k_cache[first_pos:], self.v_cache[first_pos:]  # positions are (re)written in order
        self.k_cache += list(k)
        self.v_cache += list(v)
        keys, vals = torch.stack(self.k_cache), torch.stack(self.v_cache)  # [P, kvh, d]
        out = torch.empty(n, heads, d)
        group = heads // kvh
        for i in range(n):
            p = first_pos + i
            for h in range(heads):
                s = keys[: p + 1, h // group] @ q[i, h] / d ** 0.5
                out[i, h] = torch.softmax(s, 0) @ vals[: p + 1, h // group]
        r = out.reshape(n, heads * d) @ t["midlayer.self_attn.o_proj.weight"].T + g
        hh = rms(r, t["midlayer.post_attention_layernorm.weight"])
        mlp = (torch.nn.functional.silu(hh @ t["midlayer.mlp.gate_proj.weight"].T) *
               (hh @ t["midlayer.mlp.up_proj.weight"].T)) @ t["midlayer.mlp.down_proj.weight"].T
        return r + mlp

    def logits(self, pre):
        return rms(pre, self.t["norm.weight"]) @ self.t["lm_head.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "eagle3_tiny"))
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    # MXFP4 experts dequantized by transformers' loader (exact for the golden checkpoint's scales), then FP32.
    target = GptOssForCausalLM.from_pretrained(
        TARGET, torch_dtype=torch.bfloat16, attn_implementation="eager",
        quantization_config=transformers.Mxfp4Config(dequantize=True)).float().eval()
    tc = target.config
    H, V = tc.hidden_size, tc.vocab_size
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": INTER, "num_attention_heads": tc.num_attention_heads,
           "num_key_value_heads": tc.num_key_value_heads, "head_dim": tc.head_dim, "num_hidden_layers": 1,
           "vocab_size": V, "draft_vocab_size": DRAFT_VOCAB, "rms_norm_eps": EPS, "rope_theta": THETA,
           "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX, "use_aux_hidden_state": True}}
    qd, kvd = tc.num_attention_heads * tc.head_dim, tc.num_key_value_heads * tc.head_dim

    def w(*shape, std=0.05, mean=0.0):
        return (torch.randn(*shape) * std + mean).to(torch.bfloat16)

    tensors = {"fc.weight": w(H, 3 * H, std=0.5 / (3 * H) ** 0.5),
               "midlayer.input_layernorm.weight": w(H, std=0.05, mean=1.0),
               "midlayer.hidden_norm.weight": w(H, std=0.05, mean=1.0),
               "midlayer.self_attn.q_proj.weight": w(qd, 2 * H, std=1.0 / (2 * H) ** 0.5),
               "midlayer.self_attn.k_proj.weight": w(kvd, 2 * H, std=1.0 / (2 * H) ** 0.5),
               "midlayer.self_attn.v_proj.weight": w(kvd, 2 * H, std=1.0 / (2 * H) ** 0.5),
               "midlayer.self_attn.o_proj.weight": w(H, qd, std=1.0 / qd ** 0.5),
               "midlayer.post_attention_layernorm.weight": w(H, std=0.05, mean=1.0),
               "midlayer.mlp.gate_proj.weight": w(INTER, H, std=1.0 / H ** 0.5),
               "midlayer.mlp.up_proj.weight": w(INTER, H, std=1.0 / H ** 0.5),
               "midlayer.mlp.down_proj.weight": w(H, INTER, std=1.0 / INTER ** 0.5),
               "norm.weight": w(H, std=0.05, mean=1.0),
               "lm_head.weight": w(DRAFT_VOCAB, H, std=1.0 / H ** 0.5)}
    draft_ids = torch.sort(torch.randperm(V)[:DRAFT_VOCAB]).values
    tensors["d2t"] = (draft_ids - torch.arange(DRAFT_VOCAB)).to(torch.int64)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[draft_ids] = True
    tensors["t2d"] = t2d
    os.makedirs(os.path.join(a.out, "head"), exist_ok=True)
    save_file(tensors, os.path.join(a.out, "head", "model.safetensors"))
    with open(os.path.join(a.out, "head", "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    t32 = {k: v.float() for k, v in tensors.items() if v.dtype == torch.bfloat16}

    # The target's states: id k is the input of layer k; id num_layers the last layer's output (pre-norm).
    layers = target.model.layers
    captured = {}

    def pre_hook(k):
        def f(_module, args, kwargs):
            captured[k] = (args[0] if args else kwargs["hidden_states"]).detach().clone()
        return f

    def last_hook(_module, _args, output):
        captured[len(layers)] = (output[0] if isinstance(output, tuple) else output).detach().clone()

    for k, layer in enumerate(layers):
        layer.register_forward_pre_hook(pre_hook(k), with_kwargs=True)
    layers[-1].register_forward_hook(last_hook)
    embed = target.model.embed_tokens.weight.detach().float()

    rng = np.random.default_rng(a.seed)
    cases = []
    for n in (5, 13, 24):
        prompt = [int(x) for x in rng.integers(0, V, n)]
        captured.clear()
        with torch.no_grad():
            out = target(torch.tensor([prompt]), output_hidden_states=True)
            logits = out.logits[0]
            for k in range(len(layers)):  # the hooks agree with transformers' own hidden_states[k]
                assert torch.equal(captured[k], out.hidden_states[k]), k
            aux = torch.cat([captured[k][0] for k in AUX], dim=-1)  # [n, 3H]
            first = int(torch.argmax(logits[-1]))
            head = Head(t32, cfg)
            g = aux @ t32["fc.weight"].T
            pre = head.layer(g, torch.tensor(prompt[1:] + [first]), 0, embed)[-1:]
            drafts, margins, pos = [], [], n - 1
            for j in range(K):
                lg = head.logits(pre)[0]
                top = torch.topk(lg, 2).values
                margins.append(float(top[0] - top[1]))
                drafts.append(int(draft_ids[int(torch.argmax(lg))]))
                if j + 1 < K:
                    pre = head.layer(pre, torch.tensor([drafts[-1]]), pos + j + 1, embed)
        cases.append({"prompt": prompt, "target_next": first, "drafts": drafts, "margins": margins})
    ref = {"target": "tests/golden/tiny/checkpoint", "head": "head", "aux_layers": AUX, "k": K, "cases": cases,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"wrote {a.out}: {len(cases)} cases, smallest draft margin {min(min(c['margins']) for c in cases):.4f}")


if __name__ == "__main__":
    main()
