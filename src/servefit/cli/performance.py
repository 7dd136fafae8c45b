"""The performance side of the CLI: workload flags, and the ``compare`` and ``cost`` bodies
(``plan`` adds its performance section through :func:`predict`)."""

from __future__ import annotations

from typing import Any

import click

from servefit.errors import InvalidArgumentError

ENGINES = ("vllm", "sglang", "trtllm", "llama.cpp", "mlx")

_WORKLOAD_OPTIONS = [
    click.option(
        "--input-len", type=int, default=1024, show_default=True, help="Prompt tokens per request."
    ),
    click.option(
        "--output-len", type=int, default=256, show_default=True, help="Output tokens per request."
    ),
    click.option(
        "--request-rate",
        type=float,
        help="Poisson arrivals per second (open loop; --concurrency then caps requests in flight).",
    ),
    click.option(
        "--prefix-len",
        type=int,
        default=0,
        show_default=True,
        help="Prompt tokens every request shares (system prompt, tools): cached once.",
    ),
    click.option(
        "--turns",
        type=int,
        default=1,
        show_default=True,
        help="Agent sessions: each turn re-sends the history plus (input-len - prefix-len) "
        "new tokens.",
    ),
    click.option(
        "--range-ratio",
        type=float,
        default=0.0,
        show_default=True,
        help="Lengths uniform in len x (1 +/- ratio), as vllm bench --random-range-ratio.",
    ),
    click.option(
        "--num-requests", type=int, help="Requests to simulate [enough for a steady state]."
    ),
    click.option(
        "--engine",
        type=click.Choice(ENGINES),
        help="Serving engine whose efficiency to assume [vllm; mlx on Apple].",
    ),
    click.option(
        "--calibration",
        type=click.Path(dir_okay=False),
        help="A profile from `servefit calibrate`: the device's measured efficiency factors.",
    ),
    click.option("--slo-ttft-ms", type=float, help="Goodput: TTFT limit in ms."),
    click.option("--slo-tpot-ms", type=float, help="Goodput: time-per-output-token limit in ms."),
]


def workload_options(command: Any) -> Any:
    for option in reversed(_WORKLOAD_OPTIONS):
        command = option(command)
    return command


def pop_calibration(flags: dict[str, Any]) -> Any:
    """The calibration document named by --calibration, or None."""
    from pathlib import Path

    path = flags.pop("calibration", None)
    if path is None:
        return None
    from servefit.calibrate.profile import load_calibration

    return (load_calibration(Path(path)), path)


def pop_workload(flags: dict[str, Any], concurrency: int | None) -> tuple[Any, str | None, Any]:
    """(Workload, engine, Slo | None) from the workload flags."""
    from servefit.core.workload import LengthDist, Slo, Workload

    rate = flags.pop("request_rate", None)
    ratio = flags.pop("range_ratio", 0.0)
    workload = Workload(
        input_len=LengthDist(mean=flags.pop("input_len"), range_ratio=ratio),
        output_len=LengthDist(mean=flags.pop("output_len"), range_ratio=ratio),
        concurrency=concurrency,
        request_rate_per_s=rate,
        num_requests=flags.pop("num_requests", None),
        prefix_len=flags.pop("prefix_len", 0),
        turns=flags.pop("turns", 1),
    )
    if rate is None and workload.concurrency is None:
        raise InvalidArgumentError("give --concurrency or --request-rate")
    engine = flags.pop("engine", None)
    ttft_ms = flags.pop("slo_ttft_ms", None)
    tpot_ms = flags.pop("slo_tpot_ms", None)
    slo = None
    if ttft_ms is not None or tpot_ms is not None:
        slo = Slo(
            ttft_s=ttft_ms / 1e3 if ttft_ms is not None else None,
            tpot_s=tpot_ms / 1e3 if tpot_ms is not None else None,
        )
    return workload, engine, slo


def profile_for(gpu: Any, engine: str | None, calibration: Any = None) -> Any:
    """The efficiency profile for a GPU and engine, with a calibration's hardware factors."""
    from servefit.adapters.catalog import efficiency_table

    profile = efficiency_table().for_gpu(gpu, engine)
    if calibration is None:
        return profile
    from servefit.calibrate.profile import calibrated_profile, check_matches

    doc, path = calibration
    check_matches(doc, gpu)
    return calibrated_profile(doc, profile, path)


def predict(
    plan: Any, workload: Any, engine: str | None, slo: Any, ep: int = 1, calibration: Any = None
) -> Any:
    """The performance plan of ``workload`` on a capacity plan that starts."""
    from servefit.core.perf import plan_performance

    profile = profile_for(plan.gpu, engine, calibration)
    return plan_performance(plan, workload, profile, slo=slo, ep=ep)


def cost_inputs(
    perf: Any, plan: Any, usd_per_gpu_hour: float, price_source: str, **task: Any
) -> Any:
    """The cost model's inputs from a performance plan at its workload."""
    from servefit.core.cost import CostInputs

    return CostInputs(
        usd_per_gpu_hour=usd_per_gpu_hour,
        num_gpus=plan.settings.num_gpus,
        request_throughput_per_s=perf.load.request_throughput_per_s,
        prefill_s_per_request=perf.prefill.time_s,
        input_tokens=perf.workload.input_len.mean,
        output_tokens=perf.workload.output_len.mean,
        price_source=price_source,
        **task,
    )


def compare_rows(
    models: tuple[str, ...],
    gpu_names: list[str],
    settings: Any,
    workload: Any,
    engine: str | None,
    slo: Any,
    offline: bool,
    calibration: Any = None,
) -> tuple[list[Any], list[str]]:
    """One row per (model, GPU): the four numbers, the fit and the performance."""
    from servefit.adapters.catalog import gpu_catalog
    from servefit.adapters.model_source import load_model
    from servefit.adapters.perf_document import CompareRow, performance_section
    from servefit.core.plan import plan_capacity
    from servefit.core.weights import count_params
    from servefit.errors import ServefitError

    rows: list[CompareRow] = []
    perfs: list[tuple[str, str, Any, Any]] = []
    for model in models:
        loaded = load_model(model, allow_hub=not offline)
        for name in gpu_names:
            gpu = gpu_catalog().get(name)
            plan = plan_capacity(loaded.spec, gpu, settings, mamba_ssm_dtype=loaded.mamba_ssm_dtype)
            perf = None
            problem = "" if plan.starts else plan.problems[0]
            if plan.starts:
                try:
                    perf = predict(plan, workload, engine, slo, calibration=calibration)
                except ServefitError as error:
                    problem = str(error)
            n = plan.settings.num_gpus
            rows.append(
                CompareRow(
                    model=loaded.spec.name,
                    gpu=gpu.name,
                    num_gpus=n,
                    memory_bytes=gpu.memory_bytes * n,
                    memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s * n,
                    peak_16bit_flops_per_s=(gpu.bf16_flops_per_s or gpu.fp16_flops_per_s or None),
                    interconnect_bandwidth_bytes_per_s=gpu.interconnect_bandwidth_bytes_per_s,
                    fits=plan.starts,
                    problem=problem,
                    active_params=count_params(plan.model).active,
                    performance=performance_section(perf) if perf else None,
                )
            )
            if perf is not None:
                perfs.append((loaded.spec.name, gpu.name, perf, gpu))
    return rows, explain_decode(perfs)


def explain_decode(perfs: list[tuple[str, str, Any, Any]]) -> list[str]:
    """Why one machine decodes faster than another: bandwidth over bytes read per token."""
    lines = []
    for model, gpu_name, perf, gpu in perfs:
        bw = gpu.memory_bandwidth_bytes_per_s
        lines.append(
            f"{model} on {gpu_name}: one decode step reads {perf.decode_bytes_per_token / 1e9:.2f}"
            f" GB per GPU ({perf.weight_bytes_per_token / 1e9:.2f} GB of weights); "
            f"{bw / 1e9:,.0f} GB/s / {perf.decode_bytes_per_token / 1e9:.2f} GB = "
            f"{bw / perf.decode_bytes_per_token:,.0f} tok/s ceiling, "
            f"{1 / perf.tpot_batch1_s:,.0f} tok/s predicted at batch 1 "
            f"({perf.decode.bound.value}-bound)"
        )
    surprising = []
    for fast in perfs:
        for slow in perfs:
            f_perf, s_perf = fast[2], slow[2]
            f_bw = fast[3].memory_bandwidth_bytes_per_s
            s_bw = slow[3].memory_bandwidth_bytes_per_s
            if f_perf.tpot_batch1_s < s_perf.tpot_batch1_s and f_bw < s_bw:
                surprising.append((fast, slow))
    for fast, slow in surprising:
        f_perf, s_perf = fast[2], slow[2]
        lines.append(
            f"{fast[0]} on {fast[1]} decodes "
            f"{s_perf.tpot_batch1_s / f_perf.tpot_batch1_s:.1f}x faster than {slow[0]} on "
            f"{slow[1]} although {slow[1]} has "
            f"{slow[3].memory_bandwidth_bytes_per_s / fast[3].memory_bandwidth_bytes_per_s:.1f}x "
            f"the bandwidth: it reads "
            f"{s_perf.decode_bytes_per_token / f_perf.decode_bytes_per_token:.1f}x fewer bytes "
            f"per token ({f_perf.decode_bytes_per_token / 1e9:.2f} GB vs "
            f"{s_perf.decode_bytes_per_token / 1e9:.2f} GB: active parameters x bytes per "
            "parameter, plus the KV cache)"
        )
    return lines
