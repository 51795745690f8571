#!/usr/bin/env bash
# The tiny model and its 1-layer draft from the same data, on a machine with one GPU, PyTorch and transformers
# (openai-harmony is not needed there: make the data first, anywhere, with tools/train/make_data.py DATA_DIR):
#   tools/train/build_on_gpu.sh DATA_DIR OUT_DIR [train.py flags for the main model...]
# Writes, for the main model (4 layers) in OUT_DIR and for the draft (1 layer) in OUT_DIR/draft: hf/
# (transformers' layout), mxfp4/ (the official layout orchid loads) and tiny.packed.safetensors (what the
# repository keeps), OUT_DIR/eagle3 (an EAGLE-3 head for the quantized main model, train_eagle3.py) and
# OUT_DIR/reference (transformers' outputs on the main model, make_reference.py); then prints the training
# reports.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 DATA_DIR OUT_DIR [train.py flags...]" >&2; exit 2; }
data=$1 out=$2
shift 2
# Both trainings first (the part only this machine can do), then the conversions.
python3 tools/train/train.py --data "$data" --out "$out/hf" "$@"
# The draft for speculative decoding: the same data and seed, one (full-attention) layer, fewer steps.
python3 tools/train/train.py --data "$data" --out "$out/draft/hf" --layers 1 --steps 1500
for dir in "$out" "$out/draft"; do
  python3 tools/train/export_mxfp4.py "$dir/hf" "$dir/mxfp4" --tokenizer /nonexistent
  python3 tools/train/pack.py pack "$dir/mxfp4" "$dir/tiny.packed.safetensors"
done
# An EAGLE-3 head for the quantized main model (the published layout; models/orchid-tiny-eagle3).
python3 tools/train/train_eagle3.py --target "$out/mxfp4" --data "$data" --out "$out/eagle3"
# transformers' outputs on the quantized main model, for tools/train/check_reference.py.
python3 tools/train/make_reference.py "$out/mxfp4" "$data" "$out/reference"
cat "$out/hf/train_report.json" "$out/draft/hf/train_report.json" "$out/eagle3/train_report.json"
