"""The public API named in servefit.__all__ resolves, and the docstring's example runs."""

from __future__ import annotations

import servefit


def test_every_exported_name_resolves():
    for name in servefit.__all__:
        assert getattr(servefit, name) is not None, name


def test_the_docstring_example():
    from servefit import (
        ServeSettings,
        efficiency_table,
        fixed_workload,
        gpu_catalog,
        load_model,
        plan_capacity,
        plan_performance,
    )

    loaded = load_model("meta-llama/Llama-3.1-8B", allow_hub=False)
    gpu = gpu_catalog().get("H100")
    plan = plan_capacity(loaded.spec, gpu, ServeSettings(max_model_len=8192))
    perf = plan_performance(
        plan, fixed_workload(1024, 256, concurrency=8), efficiency_table().for_gpu(gpu)
    )
    assert perf.ttft_s > 0 and perf.tpot_s > 0 and perf.output_throughput_tok_per_s > 0
    assert perf.bound.value == "memory bandwidth"
