#!/usr/bin/env bash
# The GPU evidence for `servefit calibrate` (issue #6), as one prepared run on a lent GPU
# machine: a dense and an MoE model, decode at batch 1..256 and prefill 1k..32k (--plan
# full), each profile written under $OUT (copy them to calibrations/ with the date), then a
# short table. Dependencies the machine lacks travel as wheels in ./.whl (see the device
# tool's notes); PyTorch and nvidia-ml-py are there already.
set -euo pipefail
OUT="${OUT:-/tmp/servefit-calibrate}"
mkdir -p "$OUT"
python3 -m pip install --quiet --no-index --find-links .whl --no-deps . 2>/dev/null \
    || python3 -m pip install --quiet --no-deps .
python3 -m pip install --quiet --no-index --find-links .whl \
    pydantic click rich huggingface_hub packaging aiohttp 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/nvidia-smi.csv"
for model in meta-llama/Llama-3.1-8B Qwen/Qwen3-30B-A3B; do
    name="$(echo "$model" | tr '/' '_')"
    servefit calibrate "$model" --offline --plan full -o "$OUT/$name.json" \
        | tee "$OUT/$name.txt"
done
servefit calibrate meta-llama/Llama-3.1-8B --offline --quick -o "$OUT/quick.json" > "$OUT/quick.txt"
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for f in sorted(out.glob("*.json")):
    d = json.loads(f.read_text())
    m, ds = d["measured"], d["datasheet"]
    print(f"{f.name}: read {m['read_bandwidth_bytes_per_s']/1e12:.2f}/{ds['memory_bandwidth_bytes_per_s']/1e12:.2f} TB/s,"
          f" bf16 {m['matmul_flops_per_s'].get('bf16', 0)/1e12:.0f}/{ds['peak_flops_per_s'].get('bf16', 0)/1e12:.0f} TFLOP/s,"
          f" median step error {d['median_error_before']:.0%} -> {d['median_error_after']:.0%}")
PY
