"""servefit against real vLLM startup logs (benchmarks/fidelity/startup_logs.json).

Each case holds the flags of a real ``vllm serve`` run and the numbers vLLM printed. Two checks:

* given the logged "Available KV cache memory" (as ``--kv-cache-memory-bytes``), servefit
  reproduces "GPU KV cache size" to the token and "Maximum concurrency" to the printed two
  decimals. The log prints the memory in GiB with two decimals, so the memory vLLM sized
  the cache from lies within 0.005 GiB of the printed figure: planned at both ends of that
  interval, servefit's token counts must bracket the logged count (and its concurrencies
  the logged concurrency, give or take the printed rounding);
* given only the GPU and the flags, servefit predicts "Available KV cache memory" within 5 %.

Pipeline-parallel logs print one worker's KV memory while the engine sizes the cache from the
smallest worker, so for them only the prediction is checked.
"""

from __future__ import annotations

import json

import pytest
from tests.corpus import STARTUP_LOGS

from servefit.core.plan import ServeSettings, plan_capacity
from servefit.units import GIB_BYTES

CASES = json.loads(STARTUP_LOGS.read_text())["cases"]
GIB_ROUNDING = 0.005 * GIB_BYTES  # logs print GiB with two decimals
PREDICTION_GAPS: set[str] = set()  # cases whose loading servefit does not model: none now


def _settings(case, **extra):
    s = dict(case["settings"])
    return ServeSettings(vllm_version=case["vllm_version"], **s, **extra)


def _plan(case, catalog_model, gpu, **extra):
    loaded = catalog_model(case["catalog_model"])
    return plan_capacity(
        loaded.spec,
        gpu("H100-SXM"),
        _settings(case, **extra),
        mamba_ssm_dtype=loaded.mamba_ssm_dtype,
    )


def _ids(cases):
    return [c["name"] + " " + c["source"].rsplit("/", 1)[-1][:40] for c in cases]


SINGLE_STAGE = [c for c in CASES if c["settings"]["pipeline_parallel_size"] == 1]
ON_H100 = [c for c in CASES if c["gpu"] and "H100" in c["gpu"] and c["name"] not in PREDICTION_GAPS]


def test_the_goldens_cover_every_kind():
    kinds = " ".join(str(c["kind"]) for c in SINGLE_STAGE)
    for kind in ("dense", "MoE", "MLA", "sliding", "hybrid"):
        assert kind.lower() in kinds.lower(), kind


@pytest.mark.parametrize("case", SINGLE_STAGE, ids=_ids(SINGLE_STAGE))
def test_reproduces_kv_cache_size_and_concurrency(case, catalog_model, gpu):
    logged = case["logged"]
    kv_bytes = logged["available_kv_cache_gib"] * GIB_BYTES
    low, high = (
        _plan(case, catalog_model, gpu, kv_cache_memory_bytes=int(kv_bytes + sign * GIB_ROUNDING))
        for sign in (-1, 1)
    )
    assert low.kv_cache_tokens <= logged["gpu_kv_cache_tokens"] <= high.kv_cache_tokens
    printed = 0.005  # "Maximum concurrency ... : 12.34x"
    assert low.max_concurrency - printed <= logged["max_concurrency"]
    assert logged["max_concurrency"] <= high.max_concurrency + printed


@pytest.mark.parametrize("case", ON_H100, ids=_ids(ON_H100))
def test_predicts_available_kv_cache_memory(case, catalog_model, gpu):
    plan = _plan(case, catalog_model, gpu)
    logged = case["logged"]["available_kv_cache_gib"] * GIB_BYTES
    assert plan.memory.kv_cache_bytes == pytest.approx(logged, rel=0.05)
