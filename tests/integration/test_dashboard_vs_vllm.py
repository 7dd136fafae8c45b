"""The Grafana dashboard of deploy/grafana/ against the real vLLM (CPU) server: every vLLM
series a panel queries is one this vLLM serves on /metrics (read with prometheus_client's
parser), after a request went through, so no panel of the dashboard is silently empty.
(The servefit_* series are held to the exporter in tests/unit/test_exporter.py.)"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "servefit-vllm.json"


def test_every_vllm_series_of_the_dashboard_is_served(vllm_server):
    body = json.dumps({"model": "tiny-llama", "prompt": "Hello there", "max_tokens": 4})
    request = urllib.request.Request(
        f"{vllm_server.base_url}/v1/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200
    with urllib.request.urlopen(f"{vllm_server.base_url}/metrics", timeout=60) as response:
        text = response.read().decode()
    served = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    named = {n for e in exprs for n in re.findall(r"vllm:[a-z0-9_]+", e)}
    assert len(named) >= 6, named
    assert named <= served, sorted(named - served)
    # the dashboard's model variable reads this label, and the server sets it
    labels = {k for f in text_string_to_metric_families(text) for s in f.samples for k in s.labels}
    assert "model_name" in labels
