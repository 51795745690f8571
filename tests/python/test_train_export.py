"""tools/train/export_mxfp4.py and checkpoint.py: MXFP4 quantization (error within half an e2m1 step of the
block scale, ties to even, exact for values it can hold) and the export from transformers' layout to the
official one, checked end to end: the golden tiny checkpoint taken to transformers' BF16/FP32 layout and exported
back gives the same weights and, through `orchid forward`, the same logits bit for bit."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "train"))
import checkpoint  # noqa: E402
import export_mxfp4  # noqa: E402

GOLDEN = ROOT / "tests" / "golden" / "tiny" / "checkpoint"


def test_quantization_error_rounding_and_exact_values():
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((2, 48, 96)) * np.exp2(rng.integers(-12, 4, (2, 48, 1)))).astype(np.float32)
    w[0, 0, :32] = 0.0  # an all-zero block
    blocks, scales = checkpoint.mxfp4_quantize(w)
    d = checkpoint.mxfp4_dequantize(blocks, scales)
    step = np.exp2(scales.astype(np.float64) - 127.0)  # e2m1 values are at most 2 units of 2^e apart
    assert np.all(np.abs(d - w).reshape(2, 48, 3, 32) <= step[..., None] * (1 + 1e-6))
    assert np.all(np.abs(w).reshape(2, 48, 3, 32).max(-1) <= 6 * step + 1e-30)  # nothing clipped
    assert np.all(d[0, 0, :32] == 0)
    # Values MXFP4 holds come back exactly; ties go to the even code: 5 -> 4 and 2.5 -> 2 (with 6 fixing e = 0).
    b2, s2 = checkpoint.mxfp4_quantize(d)
    assert np.array_equal(checkpoint.mxfp4_dequantize(b2, s2), d)
    tie = np.zeros((1, 32), np.float32)
    tie[0, :4] = [6.0, 5.0, 2.5, -0.25]
    t = checkpoint.mxfp4_dequantize(*checkpoint.mxfp4_quantize(tie))[0, :4]
    assert t.tolist() == [6.0, 4.0, 2.0, -0.0]


def to_transformers_layout(src, dst):
    """The golden checkpoint as save_pretrained writes an unquantized model: experts FP32 [E, in, out]."""
    tensors = checkpoint.read_checkpoint(src)
    out = {}
    for name, a in tensors.items():
        if name.endswith("_blocks"):
            base = name[: -len("_blocks")]
            w = checkpoint.mxfp4_dequantize(a, tensors[base + "_scales"])  # [E, out, in]
            out[base] = np.ascontiguousarray(np.swapaxes(w, 1, 2))
        elif not name.endswith("_scales"):
            out[name] = a
    dst.mkdir()
    checkpoint.write_safetensors(dst / "model.safetensors", out)
    config = json.loads((src / "config.json").read_text())
    config.pop("quantization_config")
    (dst / "config.json").write_text(json.dumps(config))
    shutil.copyfile(src / "generation_config.json", dst / "generation_config.json")


def test_export_round_trip_gives_the_same_weights_and_logits(tmp_path, orchid):
    hf, exported, no_tokenizer = tmp_path / "hf", tmp_path / "exported", tmp_path / "none"
    no_tokenizer.mkdir()
    to_transformers_layout(GOLDEN, hf)
    export_mxfp4.export(hf, exported, no_tokenizer)
    golden, got = checkpoint.read_checkpoint(GOLDEN), checkpoint.read_checkpoint(exported)
    assert set(got) == set(golden)
    for name, a in golden.items():
        if name.endswith("_blocks"):
            base = name[: -len("_blocks")]
            assert got[name].shape == a.shape and got[base + "_scales"].shape == golden[base + "_scales"].shape
            assert np.array_equal(checkpoint.mxfp4_dequantize(got[name], got[base + "_scales"]),
                                  checkpoint.mxfp4_dequantize(a, golden[base + "_scales"])), name
        elif not name.endswith("_scales"):
            assert got[name].dtype == a.dtype and np.array_equal(got[name], a), name
    assert json.loads((exported / "config.json").read_text())["quantization_config"]["quant_method"] == "mxfp4"
    ids = ",".join(str(i) for i in range(1, 30, 3))
    logits = []
    for model in (GOLDEN, exported):
        out = tmp_path / f"{model.name}.npy"
        orchid("forward", model, "--ids", ids, "--logits-out", out, "--backend", "cpu")
        logits.append(np.load(out))
    assert logits[0].shape[0] == 10 and np.array_equal(logits[0], logits[1])


def test_pack_keeps_used_rows_and_unpack_rebuilds_the_bytes(tmp_path, orchid):
    import pack
    synth = tmp_path / "synth"
    orchid("synth", synth, "--preset", "tiny")  # the full 201,088-token vocabulary at width 128
    tensors = checkpoint.read_checkpoint(synth)
    used = np.unique(np.random.default_rng(5).integers(0, 201088, 900))
    for name in pack.VOCAB_TENSORS:  # what train.py leaves: the unused rows all alike
        rows = np.asarray(tensors[name]).view(np.uint16).copy()
        keep = rows[used].copy()
        rows[:] = rows[7]
        rows[used] = keep
        tensors[name] = rows.view(checkpoint.Bf16)
    trained = tmp_path / "trained"
    trained.mkdir()
    checkpoint.write_safetensors(trained / "model.safetensors", tensors)
    for f in ("config.json", "generation_config.json"):
        shutil.copyfile(synth / f, trained / f)
    packed = tmp_path / "tiny.packed.safetensors"
    size = pack.pack(trained, packed)
    assert size < (trained / "model.safetensors").stat().st_size / 10
    out = tmp_path / "unpacked"
    pack.unpack(packed, out, tmp_path)
    assert (out / "model.safetensors").read_bytes() == (trained / "model.safetensors").read_bytes()
    assert (out / "config.json").read_text() == (synth / "config.json").read_text()
    # A damaged packed file is refused, not rebuilt into other weights.
    data = bytearray(packed.read_bytes())
    data[-5] ^= 0x40
    packed.write_bytes(bytes(data))
    try:
        pack.unpack(packed, tmp_path / "damaged", tmp_path)
        raise AssertionError("unpack accepted a damaged file")
    except SystemExit as e:
        assert "SHA-256" in str(e)
