#!/bin/bash
# Structured outputs on the CUDA backend: `orchid bench serve` decode at 1 and 64 users with and without a JSON
# schema (vLLM's guided_json on /v1/completions), then 64 chat requests with response_format json_schema whose
# answers must parse (and validate, where the jsonschema package is installed).
# Usage: tools/gpu/structured_outputs_gpu.sh build/cuda/src/cli/orchid
set -u
bin=$(realpath "${1:?usage: structured_outputs_gpu.sh ORCHID_BINARY}")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; cd "$work"
$bin serve synthetic:20b --backend cuda --port 8011 --max-connections-per-client 0 >serve.out 2>serve.log &
pid=$!
for i in $(seq 1 240); do curl -sf http://127.0.0.1:8011/health >/dev/null && break; sleep 0.5; done
grep -i "GPU memory\|weights on" serve.log | head -3
schema='{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string","enum":["a","b","c"]}},"address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string"}},"required":["city"]}},"required":["name","age","tags","address"]}'
extra="{\"guided_json\": $schema}"
for users in 1 64; do
  n=$(( users == 1 ? 4 : 128 ))
  echo "== $users users, plain"
  $bin bench serve --url http://127.0.0.1:8011 --num-prompts $n --max-concurrency $users --input-len 128 --output-len 256 --json > plain_$users.json; echo rc=$?
  echo "== $users users, guided_json"
  $bin bench serve --url http://127.0.0.1:8011 --num-prompts $n --max-concurrency $users --input-len 128 --output-len 256 --no-ignore-eos --extra-body "$extra" --json > schema_$users.json; echo rc=$?
done
python3 - "$schema" <<'PY'
import json, sys, urllib.request, concurrent.futures as cf
schema = json.loads(sys.argv[1])
for u in (1, 64):
    a, b = (json.load(open(f"{k}_{u}.json")) for k in ("plain", "schema"))
    print(f"users {u}: plain out tok/s {a['output_tokens_per_s']:.1f} tpot p50 {a['tpot']['p50_ms']:.2f} ms | "
          f"schema out tok/s {b['output_tokens_per_s']:.1f} tpot p50 {b['tpot']['p50_ms']:.2f} ms "
          f"(out tokens {b['output_tokens']}, errors {b['errors']}) | tpot ratio {b['tpot']['p50_ms']/a['tpot']['p50_ms']:.3f}")
try:
    import jsonschema
except ImportError:
    jsonschema = None
    print("jsonschema not installed here: outputs only parsed")
def one(i):
    body = {"model": "synthetic:20b", "messages": [{"role": "user", "content": f"Person {i} as JSON"}],
            "max_tokens": 300, "seed": i,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}}}
    req = urllib.request.Request("http://127.0.0.1:8011/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=600))
    c = r["choices"][0]["message"]["content"]
    v = json.loads(c)
    if jsonschema: jsonschema.validate(v, schema)
    return r["usage"]["completion_tokens"]
ok = 0
with cf.ThreadPoolExecutor(32) as ex:
    for f in cf.as_completed([ex.submit(one, i) for i in range(64)]):
        try:
            f.result(); ok += 1
        except Exception as e:
            print("invalid:", repr(e)[:300])
print(f"chat response_format json_schema on synthetic:20b (CUDA): {ok}/64 parse" + (" and validate" if jsonschema else ""))
sys.exit(0 if ok == 64 else 1)
PY
rc=$?
kill $pid; wait $pid 2>/dev/null
tail -3 serve.log
exit $rc
