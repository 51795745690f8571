#!/usr/bin/env python3
"""Writes tests/golden/rope_yarn.json: transformers' YaRN inv_freq and attention factor (the concentration)
for the gpt-oss configs, computed by transformers itself (fp32), for orchid's RoPE tables test.

Usage: .venv/bin/python tools/golden/make_rope_golden.py
"""
import json
import os

import torch
import transformers
from transformers import GptOssConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS


def main():
    cases = []
    for name, kwargs in (("gpt-oss", {}),
                         ("truncate", {"rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                           "beta_slow": 1.0, "original_max_position_embeddings": 4096,
                                                           "truncate": True, "rope_theta": 150000.0}}),
                         ("factor8", {"rope_parameters": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 16.0,
                                                          "beta_slow": 2.0, "original_max_position_embeddings": 2048,
                                                          "truncate": False, "rope_theta": 10000.0}})):
        cfg = GptOssConfig(**kwargs)
        inv_freq, factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, torch.device("cpu"))
        rp = cfg.rope_parameters
        cases.append({"name": name, "head_dim": cfg.head_dim, "rope_theta": rp["rope_theta"], "factor": rp["factor"],
                      "beta_fast": rp["beta_fast"], "beta_slow": rp["beta_slow"],
                      "original_max_position_embeddings": rp["original_max_position_embeddings"],
                      "truncate": rp.get("truncate", True), "inv_freq": inv_freq.tolist(),
                      "attention_factor": float(factor)})
    out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "rope_yarn.json")
    with open(out, "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f, indent=1)
    print(f"wrote {os.path.abspath(out)}")


if __name__ == "__main__":
    main()
