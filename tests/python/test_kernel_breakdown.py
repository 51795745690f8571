"""tools/gpu/kernel_breakdown.py's naming of a decode step's kernels (no GPU: kernel names as the tracer
reports them)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load():
    spec = importlib.util.spec_from_file_location("kernel_breakdown",
                                                  os.path.join(ROOT, "tools", "gpu", "kernel_breakdown.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def roles(mod, names):
    return [r["part"] for r in mod.name_gemms([{"part": mod.part_of(n)} for n in names])]


def layer(first_norm, combine, split_merge=True):
    names = (["void orchid::kernels::norm::rmsnorm_residual_kernel<bf16>(float*, ...)"] if first_norm else [])
    names += ["nvjet_tst_128x64_64x4_1x2_h_bz_TNT", "rope_kv_write_kernel(...)",
              "void orchid::kernels::attention::decode_kernel<1, false>(DecodeParams)"]
    names += ["decode_merge_kernel(DecodeParams)"] if split_merge else []
    names += ["nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "splitKreduce_kernel(...)",
              "void orchid::kernels::norm::rmsnorm_residual_kernel<float>(float*, ...)",
              "void orchid::kernels::small_m_gemm_kernel<1>(...)", "route_small_kernel<1>(...)",
              "mxfp4_moe_gemm_kernel<...>(...)", "mxfp4_moe_gemm_kernel<...>(...)", combine]
    return names


def test_gemm_roles_with_and_without_the_combine_doing_the_next_norm():
    mod = load()
    plain = "void orchid::kernels::combine_kernel(...)"
    fused = "void orchid::kernels::combine_norm_kernel(...)"
    # The combine apart (every layer has its input norm), and fused (only the first layer's norm is a kernel;
    # the last layer's combine is plain: no layer follows).
    for later_norms, combine in ((True, plain), (False, fused)):
        names = layer(True, combine) + layer(later_norms, combine) + layer(later_norms, plain)
        got = [p for p in roles(mod, names) if p.startswith("GEMM")]
        want = ["GEMM: QKV projection", "GEMM: O projection", "GEMM: O projection", "GEMM: router"] * 3
        assert got == want, got
    assert mod.part_of(fused) == "experts: weighted combine + next input norm"
    assert mod.part_of(plain) == "experts: weighted combine"
    assert mod.part_of("tiled_prepare_kernel(...)") == "experts: tile plan + tiled-order input"


def test_the_gemms_after_the_final_norm_gather_are_the_lm_head():
    # A one-token step: the routing fused with the post-attention norm (no router GEMM), then the last
    # token's row gathered, normed and projected (a split-K GEMM: two launches).
    mod = load()
    names = layer(True, "void orchid::kernels::combine_kernel(...)")
    names += ["gather_rows_kernel(...)", "void orchid::kernels::norm::rmsnorm_kernel<bf16>(...)",
              "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "splitKreduce_kernel(...)"]
    got = [p for p in roles(mod, names) if p.startswith("GEMM")]
    assert got[-2:] == ["GEMM: lm_head", "GEMM: lm_head"], got
    assert got[:3] == ["GEMM: QKV projection", "GEMM: O projection", "GEMM: O projection"], got


def test_a_prefill_breakdown_takes_the_last_forward_passes_and_counts_its_floor_as_the_bench_does():
    mod = load()
    fwd = ["embedding_kernel(...)"] + layer(True, "void orchid::kernels::combine_kernel(...)")
    rows = []
    for i, name in enumerate(fwd * 3):  # a warm-up and two chunks of the measured prefill
        rows.append({"name": name, "start_ns": str(10 * i), "end_ns": str(10 * i + 5)})
    got = mod.last_prefill(list(reversed(rows)), 2)  # in any order: sorted by start
    assert len(got) == 2 * len(fwd)
    assert [int(r["start_ns"]) for r in got] == sorted(int(r["start_ns"]) for r in got)
    assert got[0]["part"] == "embedding" and int(got[0]["start_ns"]) == 10 * len(fwd)
    # Attention as cost_model.cc counts it: 4 * head_dim * heads FLOPs a (query, key) pair; full layers causal,
    # sliding layers ramping up to the 128-key window.
    T, L, per_pair = 8192, 24, 4 * 64 * 64
    pairs = L // 2 * (T * (T + 1) / 2) + L // 2 * (128 * 129 / 2 + (T - 128) * 128)
    f = mod.prefill_floors(mod.SHAPES["20b"], T, "fp8")
    assert abs(f["attention"] * mod.BF16_FLOPS / (per_pair * pairs) - 1) < 1e-9
    # Every linear layer at the FP8 ceiling, at the BF16 one with BF16 weights.
    b = mod.prefill_floors(mod.SHAPES["20b"], T, "bf16")
    for part in ("experts", "GEMM: QKV projection", "GEMM: O projection"):
        assert abs(b[part] / f[part] - mod.FP8_FLOPS / mod.BF16_FLOPS) < 1e-9, part
    # The router (32 outputs a row) by the bytes of its two BF16 input halves, in either format.
    assert f["GEMM: router"] == b["GEMM: router"] == 2 * 2 * T * 2880 * L / mod.HBM
    assert f["attention"] < f["experts"]  # at 8k the experts dominate; at 128k attention does
    g = mod.prefill_floors(mod.SHAPES["20b"], 128000, "fp8")
    assert g["attention"] > 4 * g["experts"]


def test_the_fused_qkv_rope_kernel_is_the_qkv_projection_and_leaves_the_o_gemm_its_role():
    # A one-token layer with the QKV projection, RoPE and KV write in one launch: no separate RoPE part, the
    # small-m O GEMM after attention still named O, and the fused part held to the QKV projection's floor.
    mod = load()
    names = ["void orchid::kernels::attention::(anonymous namespace)::qkv_rope_gemm_kernel(Params)",
             "void orchid::kernels::attention::decode_kernel<1, false>(DecodeParams)",
             "decode_merge_kernel(DecodeParams)", "void orchid::kernels::small_m_gemm_kernel<1, false>(...)",
             "norm_route_kernel(...)", "mxfp4_moe_gemm_kernel<...>(...)", "mxfp4_moe_gemm_kernel<...>(...)",
             "void orchid::kernels::combine_norm_kernel(...)"]
    parts = roles(mod, names)
    assert parts[0] == "GEMM: QKV projection + RoPE + KV write", parts
    assert "RoPE + KV write" not in parts
    assert parts[3] == "GEMM: O projection", parts
    step = [{"name": n, "part": p, "start_ns": str(10 * i), "end_ns": str(10 * i + 8)}
            for i, (n, p) in enumerate(zip(names, parts))]
    table = {r["part"]: r for r in mod.summarize(step, mod.SHAPES["20b"], 1, 1024, "mxfp4")["parts"]}
    qkv_floor = mod.floors(mod.SHAPES["20b"], 1, 1024, "mxfp4")["GEMM: QKV projection"] / mod.HBM * 1e6
    assert abs(table["GEMM: QKV projection + RoPE + KV write"]["floor_us"] - qkv_floor) < 1e-9


def test_time_past_the_kernels_before_counts_what_each_adds_to_the_span():
    # Overlapping launches (programmatic dependent launch): B starts while A runs and waits inside itself;
    # C lies wholly inside B; D starts after a gap. Past time: A 10, B 15 (its end past A's), C 0, D 5.
    mod = load()
    step = [{"name": n, "part": n, "start_ns": str(s), "end_ns": str(e)}
            for n, s, e in (("B", 5, 25), ("A", 0, 10), ("C", 12, 20), ("D", 30, 35))]
    got = mod.summarize(step, mod.SHAPES["20b"], 1, 1024, "mxfp4")
    past = {p["part"]: p["past_us"] * 1e3 for p in got["parts"]}
    assert past == {"A": 10, "B": 15, "C": 0, "D": 5}, past
    assert abs(sum(past.values()) - got["busy_us"] * 1e3) < 1e-9
    assert abs(got["idle_us"] * 1e3 - 5) < 1e-9
    device = {p["part"]: p["us"] * 1e3 for p in got["parts"]}
    assert device == {"A": 10, "B": 20, "C": 8, "D": 5}, device
