#!/usr/bin/env python3
"""Trains orchid's tiny Harmony model (the gpt-oss architecture at small width) on tools/train/make_data.py's
data, with transformers' GptOssForCausalLM on one GPU. Seeded; prints the held-out loss and greedy exact-match
rate, and writes a Hugging Face checkpoint (BF16 safetensors, config.json, generation_config.json).

  tools/train/train.py --data DATA_DIR --out CKPT_DIR [--steps N] [--batch B] [--lr LR] [--seed S]
                       [--layers L] [--eval N]

Token rows the data never uses start identical in the embedding and the lm_head and stay identical (an unused
embedding row gets no gradient; identical lm_head rows get identical gradients), so the checkpoint compresses
to a few MB whatever the 201,088-token vocabulary.
"""
import argparse
import inspect
import json
import math
import os
import random
import time
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (before torch starts CUDA)
import torch  # noqa: E402
from transformers import GenerationConfig, GptOssConfig, GptOssForCausalLM  # noqa: E402

VOCAB = 201088
PAD = 199999  # <|endoftext|>: never inside a conversation, only as padding here
RETURN, CALL = 200002, 200012
ROPE = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "original_max_position_embeddings": 4096, "truncate": False}


def layer_types(layers):
    """gpt-oss's alternation, sliding first; a 1-layer model (the draft) attends to everything instead, since a
    128-token window alone would forget the prompt."""
    if layers == 1:
        return ["full_attention"]
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]


def make_config(layers):
    shape = dict(hidden_size=256, intermediate_size=256, num_hidden_layers=layers, num_local_experts=8,
                 num_experts_per_tok=4, num_attention_heads=8, num_key_value_heads=2, head_dim=64, vocab_size=VOCAB,
                 sliding_window=128, max_position_embeddings=131072, swiglu_limit=7.0, rms_norm_eps=1e-5,
                 attention_bias=True, tie_word_embeddings=False, eos_token_id=[RETURN, CALL], pad_token_id=PAD,
                 layer_types=layer_types(layers))
    if "rope_parameters" in inspect.signature(GptOssConfig.__init__).parameters:  # transformers 5
        shape["rope_parameters"] = dict(ROPE, rope_theta=150000.0)
    else:
        shape["rope_scaling"] = dict(ROPE)
        shape["rope_theta"] = 150000.0
    return GptOssConfig(**shape)


def load(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def batches(rows, batch, rng, device):
    order = list(range(len(rows)))
    while True:
        rng.shuffle(order)
        for i in range(0, len(order) - batch + 1, batch):
            group = [rows[j] for j in order[i:i + batch]]
            n = max(len(r["prompt"]) + len(r["completion"]) for r in group)
            ids = torch.full((batch, n), PAD, dtype=torch.long)
            labels = torch.full((batch, n), -100, dtype=torch.long)
            mask = torch.zeros((batch, n), dtype=torch.long)
            for b, r in enumerate(group):
                seq = r["prompt"] + r["completion"]
                ids[b, :len(seq)] = torch.tensor(seq)
                mask[b, :len(seq)] = 1
                # The model is trained on the completion only (the prompt is the server's rendering).
                labels[b, len(r["prompt"]):len(seq)] = torch.tensor(r["completion"])
            yield ids.to(device), mask.to(device), labels.to(device)


@torch.no_grad()
def evaluate(model, rows, device, greedy_n):
    model.eval()
    total, count = 0.0, 0
    for r in rows:
        seq = torch.tensor([r["prompt"] + r["completion"]], device=device)
        labels = seq.clone()
        labels[0, :len(r["prompt"])] = -100
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=seq, labels=labels)
        total += out.loss.item() * len(r["completion"])
        count += len(r["completion"])
    exact = 0
    for r in rows[:greedy_n]:
        prompt = torch.tensor([r["prompt"]], device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            gen = model.generate(prompt, max_new_tokens=len(r["completion"]) + 8, do_sample=False,
                                 eos_token_id=[RETURN, CALL], pad_token_id=PAD)
        exact += gen[0, len(r["prompt"]):].tolist() == r["completion"]
    model.train()
    return total / max(1, count), exact / max(1, min(greedy_n, len(rows)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--eval", type=int, default=50, help="held-out samples decoded greedily at the end")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = "cuda"
    train, test = load(Path(a.data) / "train.jsonl"), load(Path(a.data) / "test.jsonl")
    model = GptOssForCausalLM(make_config(a.layers)).to(device)
    used = sorted({t for r in train + test for t in r["prompt"] + r["completion"]} | {PAD})
    unused = torch.ones(VOCAB, dtype=torch.bool)
    unused[used] = False
    with torch.no_grad():  # unused rows identical: they stay so (see the module docstring)
        emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        emb[unused.to(device)] = emb[unused.to(device)][0].clone()
        head[unused.to(device)] = head[unused.to(device)][0].clone()
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.1f} M parameters, {len(used)} token ids used by the data", flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, a.steps // 30)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / a.steps))))
    data = batches(train, a.batch, random.Random(a.seed), device)
    t0 = time.time()
    model.train()
    for step in range(a.steps):
        ids, mask, labels = next(data)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == a.steps - 1:
            print(f"step {step}: loss {loss.item():.4f} ({time.time() - t0:.0f} s)", flush=True)
    held_loss, exact = evaluate(model, test, device, a.eval)
    print(f"held-out: loss {held_loss:.4f}, greedy completion exact on {min(a.eval, len(test))}: {exact:.3f}")
    out = Path(a.out)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=[RETURN, CALL, 200000], pad_token_id=PAD, do_sample=False).save_pretrained(out)
    (out / "train_report.json").write_text(json.dumps(
        {"steps": a.steps, "batch": a.batch, "lr": a.lr, "seed": a.seed, "layers": a.layers, "params": params,
         "held_out_loss": held_loss, "greedy_exact": exact, "seconds": time.time() - t0}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
