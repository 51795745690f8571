#!/bin/bash
# Speculative decoding end to end on a trained model: `orchid bench serve` on the held-out prompts of the tiny
# model's data (real questions, outputs stop at <|return|> / <|call|>) at 1 and 32 users, without speculation,
# with prompt lookup and with the trained draft model, k drafts each; prints output tok/s, TPOT, the acceptance
# rate and mean accepted length, and the speed-up over the same server without speculation. Requests per run:
# $ORCHID_SPEC_PROMPTS_1 (48) at 1 user, $ORCHID_SPEC_PROMPTS_32 (320) at 32. With $ORCHID_SPEC_EAGLE3 (an EAGLE-3
# head's directory) also an eagle3 run.
# Usage: tools/gpu/speculative_bench.sh ORCHID_BINARY MODEL_DIR DRAFT_DIR DATA_DIR [K] [BACKEND]
#   DATA_DIR: make_data.py's output (its test.jsonl), or tests/golden/orchid_tiny (the held-out prompts of its
#   reference.json) where openai-harmony is not installed to make the data.
set -u
bin=$(realpath "${1:?usage: speculative_bench.sh ORCHID MODEL DRAFT DATA [K] [BACKEND]}")
model=$(realpath "$2") draft=$(realpath "$3") data=$(realpath "$4") k=${5:-3} backend=${6:-cuda}
eagle3=${ORCHID_SPEC_EAGLE3:-}
[ -n "$eagle3" ] && eagle3=$(realpath "$eagle3")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; cd "$work"
python3 - "$data" > prompts.jsonl <<'PY'
import json, os, sys
if os.path.exists(os.path.join(sys.argv[1], "test.jsonl")):
    for line in open(os.path.join(sys.argv[1], "test.jsonl")):
        r = json.loads(line)
        print(json.dumps({"prompt": r["prompt"], "max_tokens": len(r["completion"]) + 16}))
else:
    for g in json.load(open(os.path.join(sys.argv[1], "reference.json")))["greedy"]:
        print(json.dumps({"prompt": g["prompt"], "max_tokens": len(g["ids"]) + 16}))
PY
port=8021
status=0
methods=(none ngram draft_model)
[ -n "$eagle3" ] && methods+=(eagle3)
for method in "${methods[@]}"; do
  case $method in
    none) spec=() ;;
    ngram) spec=(--speculative-config "{\"method\": \"ngram\", \"num_speculative_tokens\": $k}") ;;
    draft_model) spec=(--speculative-config "{\"method\": \"draft_model\", \"model\": \"$draft\", \"num_speculative_tokens\": $k}") ;;
    eagle3) spec=(--speculative-config "{\"method\": \"eagle3\", \"model\": \"$eagle3\", \"num_speculative_tokens\": $k}") ;;
  esac
  $bin serve "$model" --backend "$backend" --port $port --max-connections-per-client 0 "${spec[@]}" \
    >serve.out 2>serve_$method.log &
  pid=$!
  for i in $(seq 1 240); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.5; done
  for users in 1 32; do
    n=$(( users == 1 ? ${ORCHID_SPEC_PROMPTS_1:-48} : ${ORCHID_SPEC_PROMPTS_32:-320} ))
    $bin bench serve --url http://127.0.0.1:$port --dataset prompts.jsonl --num-prompts $n \
      --max-concurrency $users --no-ignore-eos --extra-body '{"temperature": 0}' --json > ${method}_$users.json \
      || status=1
  done
  kill $pid; wait $pid 2>/dev/null
done
python3 - "$k" "${methods[@]}" <<'PY' || status=1
import json, sys
k = int(sys.argv[1])
methods = sys.argv[2:]
for users in (1, 32):
    base = json.load(open(f"none_{users}.json"))
    for m in methods:
        r = json.load(open(f"{m}_{users}.json"))
        s = r.get("spec_decode") or {}
        acc, mean_len = s.get("acceptance_rate"), s.get("mean_accepted_length")
        print(f"users {users:2d} {m:11s} k={k if m != 'none' else 0}: output tok/s {r['output_tokens_per_s']:8.1f}, "
              f"TPOT p50 {r['tpot']['p50_ms']:6.3f} ms, errors {r['errors']}, "
              f"acceptance {'-' if acc is None else f'{acc:.3f}'}, tokens per step "
              f"{'-' if mean_len is None else f'{mean_len:.2f}'}, speed-up "
              f"{r['output_tokens_per_s'] / base['output_tokens_per_s']:.3f}x")
        if r["errors"]:
            sys.exit(1)
PY
exit $status
