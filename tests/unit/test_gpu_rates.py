"""The GPU catalog's tensor rates: vendor figures where published, and a plan that says so
where one is missing instead of timing the matmuls at another rate in silence (issue 24)."""

from __future__ import annotations

import pytest

from servefit.adapters.catalog import efficiency_table, gpu_catalog
from servefit.core.perf import missing_rate_notes
from servefit.core.roofline import kernel_dtype


def test_rtx_5090_carries_the_whitepapers_dense_rates():
    # NVIDIA RTX Blackwell GPU Architecture whitepaper v1.1, Appendix A Table 3: FP16/BF16
    # tensor 209.5 dense with FP32 accumulate, 419 with FP16 accumulate; FP8 419 / 838; FP4 1676
    g = gpu_catalog().get("RTX-5090")
    assert g.bf16_flops_per_s == 209.5e12 and g.fp16_fp16acc_flops_per_s == 419e12
    assert g.fp8_flops_per_s == 419e12 and g.fp8_fp16acc_flops_per_s == 838e12
    assert g.fp4_flops_per_s == 1676e12
    assert kernel_dtype(g, "bf16") == "bf16"  # no longer timed at its fp32 rate


def test_dgx_spark_is_in_the_catalog():
    # NVIDIA DGX Spark: 128 GB LPDDR5X shared with the CPU, 273 GB/s, 1 PFLOP FP4 sparse
    g = gpu_catalog().get("dgx spark")
    assert g.name == "GB10" and g.memory_bandwidth_bytes_per_s == 273e9
    assert g.fp4_flops_per_s == 500e12 and g.compute_capability == "12.1"


@pytest.mark.parametrize("name", [g.name for g in gpu_catalog().gpus if g.vendor != "apple"])
def test_a_missing_rate_is_said_never_silently_replaced(name):
    gpu = gpu_catalog().get(name)
    profile = efficiency_table().for_gpu(gpu)
    for dtype in ("bf16", "fp8", "fp4"):
        notes = missing_rate_notes(gpu, [dtype], profile.unpublished_flops_per_byte)
        if kernel_dtype(gpu, dtype) == dtype:
            assert notes == ()
        else:
            assert len(notes) == 1 and f"publishes no {dtype} tensor rate" in notes[0]
