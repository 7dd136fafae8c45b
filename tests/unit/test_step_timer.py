"""The compiled step timer gives roofline.step_time's numbers bit for bit (it is what every
serving simulation times its steps with; step_time over the rows stays the reference)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from servefit.adapters.catalog import efficiency_table, model_ids
from servefit.core.ops import StepShape, model_coeffs
from servefit.core.roofline import step_time
from servefit.core.step_timer import compile_step_timer

# (TP, PP, EP, DP): DP 4 without EP (experts sliced TP x DP ways, gathered over DP) and
# DP 4 with EP = TP x DP (whole experts, all-to-all)
LAYOUTS = [(1, 1, 1, 1), (2, 1, 1, 1), (4, 2, 1, 1), (2, 1, 2, 1), (1, 3, 1, 1), (2, 1, 1, 4)]
LAYOUTS += [(1, 1, 4, 4)]


def _shapes(rng: random.Random, n: int) -> list[StepShape]:
    shapes = []
    for _ in range(n):
        decodes = tuple(rng.randint(0, 40_000) for _ in range(rng.choice([0, 1, 2, 7, 64])))
        chunks = tuple(
            (rng.randint(1, 9_000), rng.choice([0, rng.randint(0, 30_000)]))
            for _ in range(rng.choice([0, 1, 1, 2, 3]))
        )
        if not decodes and not chunks:
            decodes = (rng.randint(0, 100),)
        finishing = rng.choice([None, 0, len(chunks)])
        shape = StepShape(
            decode_contexts=decodes,
            prefill_chunks=chunks,
            num_finishing_prefills=finishing,
            # a speculative step verifies 1 + k tokens per decoding sequence
            decode_query_tokens=rng.choice([1, 1, 2, 4, 8]),
        )
        shapes.append(shape)
    return shapes


# every catalog model: dense, sliding window, MoE, MLA, sparse MLA, hybrids, Mamba, 4-bit
@pytest.mark.parametrize("model_id", model_ids())
def test_compiled_timer_equals_step_time(model_id, catalog_model, gpu):
    spec = catalog_model(model_id).spec
    rng = random.Random(model_id)
    for gpu_name in rng.sample(["H100-SXM", "A40", "L40S", "H200-SXM", "A100-80GB-SXM"], 2):
        device = gpu(gpu_name)
        fitted = efficiency_table().for_gpu(device)
        # every optional factor away from its neutral value
        stressed = replace(
            fitted,
            kv_memory_efficiency=0.7,
            low_bit_memory_efficiency=0.8,
            low_bit_compute_efficiency=0.6,
            moe_layer_overhead_s=3e-5,
        )
        for tp, pp, ep, dp in LAYOUTS:
            if pp > spec.num_layers:  # a one-layer draft head (EAGLE-3) splits into no stages
                continue
            kv = rng.choice(["auto", "fp8"])
            m = model_coeffs(spec, tp=tp, pp=pp, ep=ep, kv_cache_dtype=kv, dp=dp)
            for profile in (fitted, stressed):
                timer = compile_step_timer(m, device, profile)
                for shape in _shapes(rng, 6):
                    assert timer(shape) == step_time(m, shape, device, profile), shape
