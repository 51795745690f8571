#!/usr/bin/env python3
"""Trains an EAGLE-3 head for the tiny model (tools/train/make_data.py's data), in the published layout
orchid loads with `--speculative-config '{"method": "eagle3", "model": OUT, ...}'`.

  tools/train/train_eagle3.py --target CKPT_DIR --data DATA_DIR --out OUT [--steps N] [--depth D] [--device D]

CKPT_DIR is the target in the official MXFP4 layout (pack.py unpack's output); transformers dequantizes it.
The target's hidden states at the aux ids (id k = the input of layer k, as orchid and vLLM number them) come
from forward pre-hooks, computed once per batch without gradients. The draft vocabulary is every token id
the data uses (d2t maps it to the target's ids); labels are the data's own next tokens.

Training-time test, as the head runs at inference: depth 0 pairs fc(target states at p) with the token at
p + 1 and predicts the one at p + 2, attending over depth-0 keys; depth j > 0 takes the pre-norm output of
depth j - 1 at p - 1 as its state and attends over depth-0 keys up to p - j plus the depth-i key at p - j + i
for i = 1..j, which is exactly what the draft chain's j-th step sees after a verify step ended at p - j.
Seeded; prints the held-out top-1 accuracy per depth (the acceptance a greedy chain would get, position by
position, given the previous drafts were right).
"""
import argparse
import json
import math
import os
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from transformers import GptOssForCausalLM

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
PAD = 199999
THETA = 10000.0
EPS = 1e-5


def load_rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def default_aux(layers):
    """vLLM's (2, L/2, L-3); small models: ids in [1, L-1] (model/eagle3.h's rule)."""
    if layers >= 6:
        return [2, layers // 2, layers - 3]
    top = max(1, layers - 1)
    return [min(1, top), max(1, layers // 2), top]


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x, pos, d):
    """Llama RoPE (rotate-half pairs) on [..., T, heads, d] at positions pos [T]."""
    inv = 1.0 / (THETA ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    ang = (pos.double()[:, None] * inv[None, :]).float()
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Head(torch.nn.Module):
    def __init__(self, H, inter, heads, kv_heads, d, draft_vocab):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, d
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.fc = lin(3 * H, H)
        self.input_layernorm = torch.nn.Parameter(torch.ones(H))
        self.hidden_norm = torch.nn.Parameter(torch.ones(H))
        self.q, self.k, self.v = lin(2 * H, heads * d), lin(2 * H, kv_heads * d), lin(2 * H, kv_heads * d)
        self.o = lin(heads * d, H)
        self.post_norm = torch.nn.Parameter(torch.ones(H))
        self.gate, self.up, self.down = lin(H, inter), lin(H, inter), lin(inter, H)
        self.norm = torch.nn.Parameter(torch.ones(H))
        self.lm_head = lin(H, draft_vocab)

    def qkv(self, g, emb, pos):
        B, T, _ = g.shape
        x = torch.cat([rms(emb, self.input_layernorm), rms(g, self.hidden_norm)], dim=-1)
        q = rope(self.q(x).view(B, T, self.heads, self.d), pos, self.d)
        k = rope(self.k(x).view(B, T, self.kv_heads, self.d), pos, self.d)
        return q, k, self.v(x).view(B, T, self.kv_heads, self.d)

    def rest(self, attn, g):
        r = self.o(attn) + g
        h = rms(r, self.post_norm)
        return r + self.down(F.silu(self.gate(h)) * self.up(h))

    def unrolled(self, g0, emb, depth):
        """Pre-norm outputs [depth][B, T, H]; emb[:, p] is the embedding of the token at p + 1."""
        B, T, H = g0.shape
        pos = torch.arange(T, device=g0.device)
        group = self.heads // self.kv_heads
        keys, vals, outs = [], [], []
        g = g0
        for j in range(depth):
            if j > 0:  # depth j at p: depth j - 1's output at p - 1
                g = torch.cat([torch.zeros_like(outs[-1][:, :1]), outs[-1][:, :-1]], dim=1)
            q, k, v = self.qkv(g, emb, pos)
            keys.append(k.repeat_interleave(group, dim=2))
            vals.append(v.repeat_interleave(group, dim=2))
            # depth-0 keys at positions <= p - j, and depth i's key at p - j + i (i = 1..j).
            s0 = torch.einsum("bthd,bshd->bhts", q, keys[0]) / math.sqrt(self.d)
            allowed = pos[None, :] <= (pos[:, None] - j)
            s0 = s0.masked_fill(~allowed, float("-inf"))
            diag = []
            for i in range(1, j + 1):
                shift = j - i  # key at p - shift
                ki = torch.roll(keys[i], shifts=shift, dims=1)
                vi = torch.roll(vals[i], shifts=shift, dims=1)
                si = (q * ki).sum(-1).transpose(1, 2) / math.sqrt(self.d)  # [B, heads, T]
                si = si.masked_fill((pos < shift)[None, None, :], float("-inf"))
                diag.append((si, vi))
            scores = torch.cat([s0] + [si[..., None] for si, _ in diag], dim=-1)
            probs = torch.softmax(scores.float(), dim=-1).nan_to_num(0.0).to(q.dtype)
            out = torch.einsum("bhts,bshd->bthd", probs[..., :T], vals[0])
            for n, (_, vi) in enumerate(diag):
                out = out + probs[..., T + n].transpose(1, 2)[..., None] * vi
            outs.append(self.rest(out.reshape(B, T, -1), g))
        return outs

    def logits(self, pre):
        return self.lm_head(rms(pre, self.norm))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--depth", type=int, default=3, help="training-time test depth (draft steps unrolled)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval", type=int, default=200, help="held-out samples for the accuracy report")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max-seconds", type=float, default=0, help="stop training after this long (0: no limit)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = a.device

    target = GptOssForCausalLM.from_pretrained(
        a.target, dtype=torch.bfloat16, attn_implementation="eager",
        quantization_config=transformers.Mxfp4Config(dequantize=True)).float().to(dev).eval()
    tc = target.config
    H, L = tc.hidden_size, tc.num_hidden_layers
    aux_ids = default_aux(L)
    captured = {}
    for k, layer in enumerate(target.model.layers):
        def hook(_m, args, kwargs, k=k):
            captured[k] = (args[0] if args else kwargs["hidden_states"]).detach()
        layer.register_forward_pre_hook(hook, with_kwargs=True)

    def last_hook(_m, _a, out):
        captured[L] = (out[0] if isinstance(out, tuple) else out).detach()
    target.model.layers[-1].register_forward_hook(last_hook)
    embed = target.model.embed_tokens.weight.detach().float()

    train, test = load_rows(Path(a.data) / "train.jsonl"), load_rows(Path(a.data) / "test.jsonl")
    used = sorted({t for r in train + test for t in r["prompt"] + r["completion"]})
    to_draft = torch.full((tc.vocab_size,), -100, dtype=torch.long)
    to_draft[torch.tensor(used)] = torch.arange(len(used))
    head = Head(H, 2 * H, tc.num_attention_heads, tc.num_key_value_heads, tc.head_dim, len(used)).to(dev)

    def batch_of(rows):
        n = max(len(r["prompt"]) + len(r["completion"]) for r in rows)
        ids = torch.full((len(rows), n), PAD, dtype=torch.long)
        valid = torch.zeros((len(rows), n), dtype=torch.bool)
        for b, r in enumerate(rows):
            seq = r["prompt"] + r["completion"]
            ids[b, :len(seq)] = torch.tensor(seq)
            valid[b, :len(seq)] = True
        ids, valid = ids.to(dev), valid.to(dev)
        with torch.no_grad():
            captured.clear()
            target.model(input_ids=ids, attention_mask=valid.long())
            aux = torch.cat([captured[k] for k in aux_ids], dim=-1)
        nxt = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], PAD)], dim=1)  # token at p + 1
        lab = torch.cat([ids[:, 2:], torch.full_like(ids[:, :2], PAD)], dim=1)  # token at p + 2
        lab_ok = torch.cat([valid[:, 2:], torch.zeros_like(valid[:, :2])], dim=1)
        labels = torch.where(lab_ok, to_draft.to(dev)[lab], torch.full_like(lab, -100))
        return aux, embed[nxt], labels

    def losses(aux, emb, labels, depth):
        outs = head.unrolled(head.fc(aux), emb, depth)
        res = []
        for j, pre in enumerate(outs):
            # depth j at p predicts the token at p + 2 from a chain that started at p - j.
            lab = labels.clone()
            lab[:, :j] = -100
            res.append((head.logits(pre), lab))
        return res

    opt = torch.optim.AdamW(head.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / a.steps))))
    rng = random.Random(a.seed)
    steps_run = a.steps
    t0 = time.time()
    for step in range(a.steps):
        if a.max_seconds and time.time() - t0 > a.max_seconds:
            print(f"stopped at step {step}: --max-seconds {a.max_seconds:g}", flush=True)
            steps_run = step
            break
        aux, emb, labels = batch_of(rng.sample(train, a.batch))
        loss = sum(F.cross_entropy(lg.flatten(0, 1), lb.flatten(), ignore_index=-100) * 0.8 ** j
                   for j, (lg, lb) in enumerate(losses(aux, emb, labels, a.depth)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == a.steps - 1:
            print(f"step {step}: loss {loss.item():.4f} ({time.time() - t0:.0f} s)", flush=True)

    head.eval()
    correct, count = [0] * a.depth, [0] * a.depth
    with torch.no_grad():
        for i in range(0, min(a.eval, len(test)), a.batch):
            aux, emb, labels = batch_of(test[i:i + a.batch])
            for j, (lg, lb) in enumerate(losses(aux, emb, labels, a.depth)):
                ok = lb != -100
                correct[j] += int((lg.argmax(-1)[ok] == lb[ok]).sum())
                count[j] += int(ok.sum())
    acc = [c / max(1, n) for c, n in zip(correct, count)]
    print("held-out top-1 by draft depth: " + ", ".join(f"{x:.3f}" for x in acc))

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sd = {"fc.weight": head.fc.weight, "midlayer.input_layernorm.weight": head.input_layernorm,
          "midlayer.hidden_norm.weight": head.hidden_norm, "midlayer.self_attn.q_proj.weight": head.q.weight,
          "midlayer.self_attn.k_proj.weight": head.k.weight, "midlayer.self_attn.v_proj.weight": head.v.weight,
          "midlayer.self_attn.o_proj.weight": head.o.weight,
          "midlayer.post_attention_layernorm.weight": head.post_norm,
          "midlayer.mlp.gate_proj.weight": head.gate.weight, "midlayer.mlp.up_proj.weight": head.up.weight,
          "midlayer.mlp.down_proj.weight": head.down.weight, "norm.weight": head.norm,
          "lm_head.weight": head.lm_head.weight}
    tensors = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in sd.items()}
    tensors["d2t"] = torch.tensor(used, dtype=torch.int64) - torch.arange(len(used), dtype=torch.int64)
    save_file(tensors, str(out / "model.safetensors"))
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": 2 * H, "num_attention_heads": tc.num_attention_heads,
           "num_key_value_heads": tc.num_key_value_heads, "head_dim": tc.head_dim, "num_hidden_layers": 1,
           "vocab_size": tc.vocab_size, "draft_vocab_size": len(used), "rms_norm_eps": EPS, "rope_theta": THETA,
           "max_position_embeddings": tc.max_position_embeddings, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux_ids}}
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    (out / "train_report.json").write_text(json.dumps(
        {"steps": a.steps, "steps_run": steps_run, "batch": a.batch, "lr": a.lr, "depth": a.depth, "seed": a.seed,
         "aux_layers": aux_ids,
         "draft_vocab": len(used), "held_out_top1_by_depth": acc, "seconds": time.time() - t0}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
