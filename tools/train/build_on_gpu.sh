#!/usr/bin/env bash
# The tiny model from its data, on a machine with one GPU, PyTorch and transformers (openai-harmony is not needed
# there: make the data first, anywhere, with tools/train/make_data.py DATA_DIR):
#   tools/train/build_on_gpu.sh DATA_DIR OUT_DIR [train.py flags...]
# Writes OUT_DIR/hf (transformers' layout), OUT_DIR/mxfp4 (the official layout orchid loads) and
# OUT_DIR/tiny.packed.safetensors (what the repository keeps), then prints the training report.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: $0 DATA_DIR OUT_DIR [train.py flags...]" >&2; exit 2; }
data=$1 out=$2
shift 2
mkdir -p "$out"
python3 tools/train/train.py --data "$data" --out "$out/hf" "$@"
python3 tools/train/export_mxfp4.py "$out/hf" "$out/mxfp4" --tokenizer /nonexistent
python3 tools/train/pack.py pack "$out/mxfp4" "$out/tiny.packed.safetensors"
cat "$out/hf/train_report.json"
