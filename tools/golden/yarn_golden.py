#!/usr/bin/env python3
"""Writes tests/kernels/attention/golden/yarn.json: for gpt-oss's rotary configuration and a few variants,
the inverse frequencies, the cos/sin scaling ("attention_factor") and cos/sin at a few positions (up to
131071), all computed by transformers' own gpt-oss rotary embedding: the oracle for kernels/attention/yarn.h
and the RoPE reference of the kernel tests.

Needs torch + transformers 5.x (rope_parameters; tools/requirements-golden.txt). Run from the repository root:
    .venv/bin/python tools/golden/yarn_golden.py
"""
import json
import pathlib

import torch
import transformers
from transformers import GptOssConfig
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests/kernels/attention/golden/yarn.json"
POSITIONS = [0, 1, 17, 4095, 4096, 65537, 131071]

CASES = [
    # name, rope_parameters (transformers 5 layout)
    ("gpt-oss", {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                 "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False}),
    ("yarn-truncate", {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                       "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": True}),
    ("yarn-factor8", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "beta_fast": 16.0,
                      "beta_slow": 2.0, "original_max_position_embeddings": 8192, "truncate": False}),
    ("default", {"rope_type": "default", "rope_theta": 150000.0}),
]


def main():
    cases = []
    for name, params in CASES:
        cfg = GptOssConfig(head_dim=64, num_attention_heads=64, hidden_size=2880,
                           max_position_embeddings=131072, rope_parameters=dict(params))
        rotary = GptOssRotaryEmbedding(cfg)
        x = torch.zeros(1, dtype=torch.float32)
        cos, sin = rotary(x, torch.tensor([POSITIONS], dtype=torch.int64))
        cases.append({"name": name, "rope_parameters": params, "head_dim": 64,
                      "inv_freq": [float(v) for v in rotary.inv_freq.tolist()],
                      "concentration": float(rotary.attention_scaling),
                      "positions": POSITIONS,
                      "cos": [[float(v) for v in row] for row in cos[0].tolist()],
                      "sin": [[float(v) for v in row] for row in sin[0].tolist()]})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"generator": "tools/golden/yarn_golden.py",
                               "transformers": transformers.__version__, "cases": cases}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
