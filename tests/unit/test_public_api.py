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


def test_the_application_layer_example():
    """The deployment-level example of servefit's docstring: one call, the CLI's verdict."""
    from servefit import Deployment, Hardware, ServeSettings, default_workload, plan_deployment

    outcome = plan_deployment(
        Deployment(
            model="Qwen/Qwen3.6-27B-FP8",
            hardware=Hardware(gpu="A40"),
            settings=ServeSettings(max_model_len=32768, max_num_seqs=128),
            workload=default_workload(
                input_len=1024, output_len=64, concurrency=8, request_rate_per_s=None
            ),
            is_workload_given=True,
            allow_hub=False,
        )
    )
    # 8 requests of 1,088 tokens in a cache that holds over 100k tokens: it fits, and the
    # command pins the flags that were given
    assert outcome.fits and outcome.verdict.workload_runs
    assert outcome.vllm_command == (
        "vllm serve Qwen/Qwen3.6-27B-FP8 --max-model-len 32768 --max-num-seqs 128"
    )
    assert outcome.performance is not None and outcome.recommendation is None
