#!/usr/bin/env bash
# Re-make docs/report.png: a real bench (agent sessions) against the null server, the
# recorded bandwidth-bound GPU trace, the HTML report, and a headless-Chromium screenshot.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
servefit null-server --port 18123 --ttft-ms 15 --itl-ms 4 >/dev/null 2>&1 & server=$!
sleep 2
servefit bench http://127.0.0.1:18123 --workload agent --turns 4 --input-len 256 \
    --output-len 32 --concurrency 4 --num-requests 8 --output "$work/bench" --json >/dev/null
servefit report meta-llama/Llama-3.1-8B --gpu H200 --max-model-len 8192 --input-len 512 \
    --prefix-len 256 --output-len 32 --turns 4 --concurrency 4 --bench "$work/bench" \
    --served-model-name servefit-null \
    --gpu-samples tests/golden/gpu_traces/decode_bandwidth_bound.jsonl --format html \
    -o "$work/report.html"
python3 - "$work/report.html" docs/report.png <<'PY'
import sys
from pathlib import Path
from playwright.sync_api import sync_playwright
args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
    page = b.new_page(viewport={"width": 1100, "height": 900})
    page.goto(Path(sys.argv[1]).resolve().as_uri())
    page.screenshot(path=sys.argv[2], full_page=True)
    b.close()
PY
echo "wrote docs/report.png"
