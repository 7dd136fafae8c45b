"""Kernel weight layouts (servefit.core.kernel_layout) against public vLLM startup logs.

Each case quotes the log's backend line and "Model loading took"; the checks say what the
layout explains and, where part of the gap is a rule servefit does not model, how much is
left and why.
"""

from __future__ import annotations

import pytest

from servefit.core.kernel_layout import Kernel, LayerKind, kernel_layout
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.core.quant_formats import mxfp4
from servefit.core.weights import weight_bytes
from servefit.units import GIB_BYTES

# vLLM 0.19.0, openai/gpt-oss-20b, TP 2 on H100 80GB HBM3 (compute capability 9.0):
#   "Using 'TRITON' Mxfp4 MoE backend."
#   "Peak GPU memory after loading weights: 6.76 GiB"
#   "Model loading took 7.01 GiB memory and 12.429379 seconds"
GPT_OSS_20B_H100_TP2 = (
    "https://github.com/llm-d-incubation/llm-d-planner/blob/"
    "d3121e059da88662db39a926a3ead964be97359b/accuracy/results/v0.19.0/logs/"
    "openai-gpt-oss-20b--h100-80gb--tp2pp1dp1--8192.log"
)
LOGGED_GIB = 7.01
# What the layout cannot explain: the triton_kernels Hopper swizzle pads the values again
# (the value layout of the triton_kernels release in the wheel, not in vLLM's source), and
# vLLM 0.19 (the log) is older than the 0.32 rules. Held under this so that a change that
# widens the gap is seen.
UNMODELLED_GIB = 0.25


def test_gpt_oss_20b_on_h100_picks_triton_as_logged():
    assert kernel_layout(mxfp4(), (9, 0), LayerKind.MOE).kernel is Kernel.TRITON_MOE_MXFP4


def test_gpt_oss_20b_on_h100_tp2_weights(catalog_model, gpu):
    spec = catalog_model("openai/gpt-oss-20b").spec
    plan = plan_capacity(
        spec, gpu("H100-SXM"), ServeSettings(tensor_parallel_size=2, max_model_len=8192)
    )
    planned = plan.memory.weights_bytes / GIB_BYTES
    checkpoint = weight_bytes(spec, tp=2).per_gpu_bytes / GIB_BYTES
    # checkpoint 6.43 GiB < planned 6.83 GiB < logged 7.01 GiB. The layout adds: intermediate
    # 1,440 -> 1,472 per rank, scale groups to 4 in the swizzled copy, float32 biases, and the
    # checkpoint's scales kept beside that copy: 24 layers x 32 experts x (w13: 2 x 1,472 rows
    # x 2,880 / 32 groups + w2: 2,880 rows x 1,472 / 32 groups) = 768 x 397,440 = 305,233,920
    # bytes = 0.284 GiB
    assert round(checkpoint, 2) == 6.43
    assert round(planned, 2) == 6.83
    assert checkpoint < planned < LOGGED_GIB
    assert LOGGED_GIB - planned == pytest.approx(0.18, abs=0.01)
    assert LOGGED_GIB - planned < UNMODELLED_GIB
