#!/usr/bin/env python3
"""Which rounding moves gpt-oss's routing? Runs layer 0 of a checkpoint in FP32 with transformers (the
reference) and again with one rounding at a time, and counts the tokens whose top-k experts change among those
whose k-th and (k+1)-th reference router logits differ by more than 1e-2 (tools/gpu/layer_check.py's measure).

Variants:
  h2 bf16         the router's input (post-attention RMSNorm output) rounded to BF16, all else FP32
  o bf16          the attention block's output rounded to BF16 before the residual add
  attn bf16       the attention block run in BF16 (transformers' BF16 module), residual and router in FP32
  attn+h2 bf16    both of the above (the CUDA backend's BF16 path: BF16 activations, FP32 residual)
  all bf16        transformers' whole layer in BF16 (residual too)
and, inside the attention block (written out here in FP32, one rounding to BF16 at a time):
  att: h1         the QKV projection's input        att: qkv        Q, K, V after projection and RoPE
  att: P          the softmax probabilities         att: out        the attention output before o_proj
  cuda bf16       every rounding of the CUDA backend's BF16 path; "cuda, fine h1" the same but h1 kept in FP32

  router_precision.py --checkpoint DIR [--tokens 1024] [--seed 0]
"""
import argparse
import copy

import torch
import transformers
from transformers import GptOssForCausalLM
from transformers.models.gpt_oss.modeling_gpt_oss import apply_rotary_pos_emb, repeat_kv


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    config = transformers.AutoConfig.from_pretrained(args.checkpoint)
    config.num_hidden_layers = 1  # layer 0 is all this needs
    config.layer_types = config.layer_types[:1]
    model = GptOssForCausalLM.from_pretrained(args.checkpoint, config=config, dtype=torch.float32,
                                              attn_implementation="eager",
                                              quantization_config=transformers.Mxfp4Config(dequantize=True),
                                              **({"device_map": str(dev)} if dev.type == "cuda" else {}))
    model = model.float().to(dev).eval()
    k = model.config.num_experts_per_tok
    layer = model.model.layers[0]
    captured = {}

    def hook(mod, a, kw):
        captured["in"] = (a[0] if a else kw["hidden_states"]).detach()
        captured["kw"] = {n: v for n, v in kw.items() if n != "hidden_states"}

    h = layer.register_forward_pre_hook(hook, with_kwargs=True)
    gen = torch.Generator().manual_seed(args.seed)  # the ids of layer_check.py
    ids = torch.randint(0, min(model.config.vocab_size, 200000), (1, args.tokens), generator=gen).to(dev)
    model(ids, use_cache=False)
    h.remove()
    x = captured["in"]
    kw = captured["kw"]
    kw16 = {n: (tuple(t.to(torch.bfloat16) for t in v) if isinstance(v, tuple) else
                v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() else v)
            for n, v in kw.items()}
    W = layer.mlp.router.weight.float()
    b = layer.mlp.router.bias.float()
    bf = lambda t: t.to(torch.bfloat16).float()

    def logits_of(h2):
        return h2.reshape(-1, h2.shape[-1]) @ W.T + b

    attn = layer.self_attn(layer.input_layernorm(x), **kw)[0]
    ref = logits_of(layer.post_attention_layernorm(x + attn))
    top = torch.sort(ref, dim=-1, descending=True)
    gap = top.values[:, k - 1] - top.values[:, k]
    decided = gap > 1e-2
    ref_set = torch.sort(top.indices[:, :k], dim=-1).values

    l16 = copy.deepcopy(layer).to(torch.bfloat16)
    attn16 = l16.self_attn(l16.input_layernorm(x.to(torch.bfloat16)), **kw16)[0].float()
    mid16 = (x.to(torch.bfloat16) + attn16.to(torch.bfloat16))
    variants = {
        "h2 bf16": logits_of(bf(layer.post_attention_layernorm(x + attn))),
        "o bf16": logits_of(layer.post_attention_layernorm(x + bf(attn))),
        "attn bf16": logits_of(layer.post_attention_layernorm(x + attn16)),
        "attn+h2 bf16": logits_of(bf(layer.post_attention_layernorm(x + attn16))),
        "all bf16": logits_of(l16.post_attention_layernorm(mid16).float()),
    }
    def proj(lin, h1, round_gemm):  # round_gemm: the GEMM's output rounded to BF16 before the bias
        y = h1 @ lin.weight.T
        return (bf(y) if round_gemm else y) + lin.bias

    def attention(round_h1=False, round_qkv=False, round_p=False, round_out=False, round_gemm=False):
        a = layer.self_attn
        h1 = layer.input_layernorm(x)
        h1 = bf(h1) if round_h1 else h1
        shape = (*h1.shape[:-1], -1, a.head_dim)
        q = proj(a.q_proj, h1, round_gemm).view(shape).transpose(1, 2)
        k_ = proj(a.k_proj, h1, round_gemm).view(shape).transpose(1, 2)
        v = proj(a.v_proj, h1, round_gemm).view(shape).transpose(1, 2)
        cos, sin = kw["position_embeddings"]
        q, k_ = apply_rotary_pos_emb(q, k_, cos, sin)
        if round_qkv:
            q, k_, v = bf(q), bf(k_), bf(v)
        k_ = repeat_kv(k_, a.num_key_value_groups)
        v = repeat_kv(v, a.num_key_value_groups)
        s_ = torch.matmul(q, k_.transpose(2, 3)) * a.scaling
        mask = kw.get("attention_mask")
        if mask is not None:
            s_ = s_ + mask
        sinks = a.sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q.shape[-2], -1)
        comb = torch.cat([s_, sinks], dim=-1)
        comb = comb - comb.max(dim=-1, keepdim=True).values
        p_ = torch.softmax(comb, dim=-1)[..., :-1]
        p_ = bf(p_) if round_p else p_
        out = torch.matmul(p_, v).transpose(1, 2).reshape(*h1.shape[:-1], -1)
        out = bf(out) if round_out else out
        return a.o_proj(out)

    manual = attention()
    print(f"manual FP32 attention vs transformers': max |diff| {(manual - attn).abs().max().item():.2e}")
    for name, flags in [("att: h1", dict(round_h1=True)), ("att: qkv", dict(round_qkv=True)),
                        ("att: P", dict(round_p=True)), ("att: out", dict(round_out=True)),
                        ("att: all four", dict(round_h1=True, round_qkv=True, round_p=True, round_out=True))]:
        variants[name] = logits_of(layer.post_attention_layernorm(x + attention(**flags)))
    # The CUDA backend's BF16 path (h1, QKV GEMM output, Q/K/V, P, attention output, o_proj output and h2 in
    # BF16), and the same with the QKV projection's input kept above BF16 (split into two BF16 halves).
    for name, keep_h1 in [("cuda bf16", False), ("cuda, fine h1", True)]:
        o = bf(attention(round_h1=not keep_h1, round_qkv=True, round_p=True, round_out=True, round_gemm=True))
        variants[name] = logits_of(bf(layer.post_attention_layernorm(x + o)))
    print(f"layer 0, {args.tokens} tokens, {int(decided.sum())} decided (4th/5th gap > 1e-2); "
          f"router logit std {ref.std().item():.3f}")
    print(f"{'variant':>14} {'max |dlogit|':>13} {'misses':>7} {'agreement':>10}  gaps of the misses")
    for name, lg in variants.items():
        got = torch.sort(torch.topk(lg, k, dim=-1).indices, dim=-1).values
        miss = ~(got == ref_set).all(dim=-1) & decided
        gaps = ", ".join(f"{g:.3f}" for g in gap[miss].sort().values.tolist()[:8])
        print(f"{name:>14} {(lg - ref).abs().max().item():13.3e} {int(miss.sum()):7d} "
              f"{100 * (1 - miss.sum().item() / max(1, decided.sum().item())):9.2f}%  {gaps}")


if __name__ == "__main__":
    main()
