"""The option groups commands share, and the one builder of a :class:`Deployment` from them.

Flags use vLLM's names and spellings (``--max-model-len 32k``), so a ``vllm serve`` line and
a servefit line say the same thing the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from servefit.cli.dataset_options import DATASET_OPTIONS, dataset_requests
from servefit.cli.engine_options import apply_sglang_flags, engine_options
from servefit.cli.image_options import IMAGE_OPTIONS, pop_images
from servefit.cli.types import FINITE_FLOAT, HUMAN_INT

ENGINES = ("vllm", "sglang", "trtllm", "llama.cpp", "mlx")

Decorator = Callable[[Any], Any]


def _apply(options: list[Decorator]) -> Decorator:
    def decorate(command: Any) -> Any:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


MODEL_SOURCE_OPTIONS = [
    click.option("--revision", help="Hub revision when the config comes from the Hub."),
    click.option("--offline", is_flag=True, help="Never contact the Hugging Face Hub."),
]

HARDWARE_OPTIONS = [
    click.option("--gpu", help="GPU name or alias from the catalog (A40, a100, h100-sxm, ...)."),
    click.option(
        "--gpu-memory-gib", type=FINITE_FLOAT, help="Describe a custom GPU: memory in GiB."
    ),
    click.option(
        "--gpu-bandwidth-gbps", type=FINITE_FLOAT, help="Custom GPU: memory bandwidth in GB/s."
    ),
    click.option(
        "--calibration",
        type=click.Path(dir_okay=False),
        help="A profile from `servefit calibrate`: the device's measured efficiency factors.",
    ),
]

SERVE_OPTIONS = [
    click.option("--tensor-parallel-size", "-tp", type=int, default=1, show_default=True),
    click.option("--pipeline-parallel-size", "-pp", type=int, default=1, show_default=True),
    click.option(
        "--data-parallel-size",
        "-dp",
        type=int,
        default=1,
        show_default=True,
        help="Engine ranks of TP x PP GPUs each, every one with its own KV cache and requests; "
        "a MoE model's experts are spread over all of them.",
    ),
    click.option(
        "--max-model-len",
        type=HUMAN_INT,
        help="Longest request vLLM accepts (32768, 32k) [model's maximum].",
    ),
    click.option(
        "--max-num-seqs",
        type=int,  # a plain integer in vLLM (human-readable only for token counts)
        help="Most running sequences [vLLM's default for the GPU].",
    ),
    click.option(
        "--max-num-batched-tokens",
        type=HUMAN_INT,
        help="Tokens per scheduler step (8192, 8k) [vLLM's default].",
    ),
    click.option(
        "--gpu-memory-utilization",
        type=FINITE_FLOAT,
        help="Fraction of GPU memory vLLM may use [0.92/0.9].",
    ),
    click.option(
        "--kv-cache-dtype",
        default="auto",
        show_default=True,
        help="auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla (the ones "
        "of vLLM 0.32's choices whose page size servefit models).",
    ),
    click.option(
        "--kv-cache-memory-bytes",
        "--kv-cache-memory",
        "kv_cache_memory",
        help="KV-cache memory per GPU: bytes as vLLM spells them (44981556224, 10G = 10 GiB, "
        "10g = 10 GB) or with a unit (41.89GiB); skips the budget, as vLLM's flag does.",
    ),
    click.option(
        "--block-size", type=int, help="Tokens per KV-cache block [16; raised for hybrids]."
    ),
    click.option(
        "--mamba-ssm-cache-dtype",
        type=click.Choice(["auto", "float32", "float16", "bfloat16"]),
        default="auto",
        show_default=True,
        help="Recurrent (SSM) state dtype of hybrid models [auto: the architecture's default].",
    ),
    click.option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        default=None,
        help="Prefix caching [default: vLLM's for the model: on, off for attention-free ones "
        "(pure Mamba)].",
    ),
    click.option(
        "--enable-chunked-prefill/--no-enable-chunked-prefill",
        default=None,
        help="Chunked prefill [default: vLLM's; the V0 engine (--vllm-version before 0.8) "
        "chunks only past 32K tokens of context, V1 always].",
    ),
    click.option("--enforce-eager", is_flag=True, help="No CUDA graphs."),
    click.option("--enable-lora", is_flag=True, help="Serve LoRA adapters (vLLM's slots)."),
    click.option("--max-loras", type=int, help="LoRA adapters in one batch (GPU slots) [1]."),
    click.option(
        "--max-lora-rank",
        type=int,
        help="The largest adapter rank: 1, 8, 16, 32, 64, 128, 256, 320, 512 [16].",
    ),
    click.option(
        "--enable-expert-parallel",
        "-ep",
        is_flag=True,
        help="MoE models: each GPU holds whole experts instead of a slice of every expert.",
    ),
    click.option(
        "--dtype",
        default="auto",
        show_default=True,
        help="Weight dtype, as vLLM takes it: auto, half, float16, bfloat16, float, float32.",
    ),
    click.option("--quantization", help="Online quantization of a 16-bit checkpoint (fp8)."),
    click.option(
        "--vllm-version",
        default=None,
        help="vLLM version whose accounting to mirror: 0.8 to 0.33 [0.33].",
    ),
    click.option(
        "--speculative-config",
        help="Speculative decoding, as vLLM takes it: a JSON object, e.g. "
        '\'{"method": "ngram", "num_speculative_tokens": 3}\', '
        '\'{"method": "mtp", "num_speculative_tokens": 1}\' or '
        '\'{"method": "eagle3", "model": "HEAD", "num_speculative_tokens": 3}\'.',
    ),
    click.option(
        "--acceptance-rate",
        type=FINITE_FLOAT,
        help="Speculative decoding: the share of drafted tokens kept, each given the ones "
        "before it (0 to 1) [the method's published figure].",
    ),
    click.option(
        "--acceptance-from",
        type=click.Path(),
        help="Speculative decoding: the acceptance a `servefit bench --output RUN` measured "
        "(its folder or summary.json), per draft position.",
    ),
]

TARGET_OPTIONS = [
    click.option(
        "--context",
        "context_tokens",
        type=HUMAN_INT,
        help="Capacity target: tokens per request to hold (judged only when given).",
    ),
    click.option(
        "--target-concurrency",
        type=HUMAN_INT,
        help="Capacity target: requests of --context tokens held at once [1].",
    ),
]

WORKLOAD_OPTIONS = [
    click.option(
        "--input-len", type=HUMAN_INT, default=1024, show_default=True, help="Prompt tokens."
    ),
    click.option(
        "--output-len", type=HUMAN_INT, default=256, show_default=True, help="Output tokens."
    ),
    click.option(
        "--concurrency",
        type=HUMAN_INT,
        help="The workload's requests in flight (closed loop; with a rate, the client cap).",
    ),
    click.option(
        "--request-rate",
        type=FINITE_FLOAT,
        help="Poisson arrivals per second (open loop; no client cap unless --concurrency).",
    ),
    click.option(
        "--prefix-len",
        type=HUMAN_INT,
        default=0,
        show_default=True,
        help="Prompt tokens every request shares (system prompt, tools): cached once.",
    ),
    click.option(
        "--turns",
        type=HUMAN_INT,
        default=1,
        show_default=True,
        help="Agent sessions: each turn re-sends the history plus (input-len - prefix-len) "
        "new tokens.",
    ),
    click.option(
        "--range-ratio",
        type=FINITE_FLOAT,
        default=0.0,
        show_default=True,
        help="Lengths uniform in len x (1 +/- ratio), as vllm bench --random-range-ratio.",
    ),
    click.option(
        "--num-requests", type=HUMAN_INT, help="Requests to simulate [enough for a steady state]."
    ),
    click.option(
        "--engine",
        type=click.Choice(ENGINES),
        help="Serving engine [the one that runs on the hardware: vLLM; MLX on Apple].",
    ),
    click.option("--slo-ttft-ms", type=FINITE_FLOAT, help="Goodput: TTFT limit in ms."),
    click.option(
        "--slo-tpot-ms", type=FINITE_FLOAT, help="Goodput: time-per-output-token limit in ms."
    ),
]

_WORKLOAD_PARAMS = (
    *("input_len", "output_len", "concurrency", "request_rate", "prefix_len", "turns"),
    *("dataset", "image_size"),
)

# what a successful task is: `cost` and `report` (checked by core.cost.check_task_terms)
TASK_OPTIONS = [
    click.option(
        "--requests-per-task",
        type=FINITE_FLOAT,
        help="Requests one task takes [1; an agent session's turns with --turns].",
    ),
    click.option("--success-rate", type=FINITE_FLOAT, default=1.0, show_default=True),
    click.option(
        "--success-from",
        metavar="RUN[:TASK]",
        help="The success rate measured by `servefit eval`: a history id, an --output "
        "folder or an eval.json (a task's accuracy with :TASK) [instead of --success-rate].",
    ),
]


hardware_options = _apply(HARDWARE_OPTIONS)
task_options = _apply(TASK_OPTIONS)
model_source_options = _apply(MODEL_SOURCE_OPTIONS)
serve_options = _apply(SERVE_OPTIONS)
target_options = _apply(TARGET_OPTIONS)
workload_options = _apply([*WORKLOAD_OPTIONS, *DATASET_OPTIONS, *IMAGE_OPTIONS])


def scaling_options(num_gpus_help: str) -> Decorator:
    """``--num-gpus N`` (what it does is the command's), ``--gpus-per-node`` and
    ``--objective``: the TP x PP x DP layout search of ``plan`` and ``deploy``."""
    return _apply(
        [
            click.option("--num-gpus", type=int, help=num_gpus_help),
            click.option(
                "--gpus-per-node",
                type=int,
                default=8,
                show_default=True,
                help="Scaling: GPUs per node.",
            ),
            click.option(
                "--objective",
                type=click.Choice(["throughput", "latency"]),
                default="throughput",
                show_default=True,
                help="Scaling: what the best layout maximises (meeting the SLO flags first).",
            ),
        ]
    )


def deployment_options(command: Any) -> Any:
    """Everything that describes a deployment: the model's source, the hardware, vLLM's
    flags, the workload and the capacity target."""
    command = engine_options(command)
    for group in (
        target_options,
        workload_options,
        serve_options,
        hardware_options,
        model_source_options,
    ):
        command = group(command)
    return command


def is_workload_given() -> bool:
    """Did the user describe the workload (any workload flag on the command line)?"""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    return any(
        ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
        for name in _WORKLOAD_PARAMS
    )


def build_deployment(model: str, flags: dict[str, Any], **extra: Any) -> Any:
    """Pop the deployment's flags out of ``flags`` (what is left belongs to the command)."""
    from servefit.app.deployment import CapacityTarget, Deployment, Hardware, default_workload
    from servefit.core.metrics import Slo

    hardware = Hardware(
        gpu=flags.pop("gpu", None),
        memory_gib=flags.pop("gpu_memory_gib", None),
        bandwidth_gb_per_s=flags.pop("gpu_bandwidth_gbps", None),
        calibration_path=flags.pop("calibration", None),
    )
    settings = pop_serve_settings(flags)
    settings, engine = apply_sglang_flags(flags, settings, flags.pop("engine", None))
    images, image_args = pop_images(flags)
    workload = default_workload(
        input_len=flags.pop("input_len", 1024),
        output_len=flags.pop("output_len", 256),
        concurrency=flags.pop("concurrency", None),
        request_rate_per_s=flags.pop("request_rate", None),
        prefix_len=flags.pop("prefix_len", 0),
        turns=flags.pop("turns", 1),
        range_ratio=flags.pop("range_ratio", 0.0),
        num_requests=flags.pop("num_requests", None),
        requests=dataset_requests(flags),
    )
    context = flags.pop("context_tokens", None)
    target_concurrency = flags.pop("target_concurrency", None)
    if target_concurrency is not None and context is None:
        from servefit.errors import InvalidArgumentError

        raise InvalidArgumentError(
            "--target-concurrency needs --context (the tokens per request to hold)"
        )
    ttft_ms, tpot_ms = flags.pop("slo_ttft_ms", None), flags.pop("slo_tpot_ms", None)
    slo = None if ttft_ms is None and tpot_ms is None else Slo(ttft_ms=ttft_ms, tpot_ms=tpot_ms)
    return Deployment(
        model=model,
        hardware=hardware,
        settings=settings,
        workload=workload,
        is_workload_given=is_workload_given(),
        target=(
            CapacityTarget(context_tokens=context, concurrency=target_concurrency or 1)
            if context is not None
            else None
        ),
        slo=slo,
        engine=engine,
        gguf=flags.pop("gguf", None),
        revision=flags.pop("revision", None),
        allow_hub=not flags.pop("offline", False),
        acceptance_rate=flags.pop("acceptance_rate", None),
        acceptance_from=flags.pop("acceptance_from", None),
        images=images,
        **{**extra, "extra_args": (*extra.get("extra_args", ()), *image_args)},
    )


def pop_serve_settings(flags: dict[str, Any]) -> Any:
    """vLLM's flags (the SERVE_OPTIONS group) as ServeSettings."""
    from servefit.core.plan import ServeSettings

    kv_memory = flags.pop("kv_cache_memory", None)
    version = modelled_vllm_version(flags.pop("vllm_version", None))
    speculative = flags.pop("speculative_config", None)
    if speculative is not None:
        from servefit.adapters.speculative_config import read_speculative_config

        speculative = read_speculative_config(speculative, version)
    return ServeSettings(
        tensor_parallel_size=flags.pop("tensor_parallel_size", 1),
        pipeline_parallel_size=flags.pop("pipeline_parallel_size", 1),
        data_parallel_size=flags.pop("data_parallel_size", 1),
        max_model_len=flags.pop("max_model_len", None),
        max_num_seqs=flags.pop("max_num_seqs", None),
        max_num_batched_tokens=flags.pop("max_num_batched_tokens", None),
        gpu_memory_utilization=flags.pop("gpu_memory_utilization", None),
        kv_cache_dtype=flags.pop("kv_cache_dtype", "auto"),
        kv_cache_memory_bytes=kv_cache_bytes(kv_memory) if kv_memory else None,
        block_size=flags.pop("block_size", None),
        mamba_ssm_cache_dtype=flags.pop("mamba_ssm_cache_dtype", "auto"),
        enable_prefix_caching=flags.pop("enable_prefix_caching", None),
        enable_chunked_prefill=flags.pop("enable_chunked_prefill", None),
        enforce_eager=flags.pop("enforce_eager", False),
        dtype=flags.pop("dtype", "auto"),
        quantization=flags.pop("quantization", None),
        vllm_version=version,
        speculative=speculative,
        enable_expert_parallel=flags.pop("enable_expert_parallel", False),
        tensor_split=flags.pop("tensor_split", None),
        n_gpu_layers=flags.pop("n_gpu_layers", None),
        lora=_lora_settings(
            flags.pop("enable_lora", False),
            flags.pop("max_loras", None),
            flags.pop("max_lora_rank", None),
        ),
    )


def modelled_vllm_version(version: str | None) -> str:
    """``--vllm-version``: a release whose accounting servefit mirrors (0.8 to the default),
    never a later one silently planned as the latest servefit knows."""
    from servefit.core.engine import DEFAULT_VLLM_VERSION, parse_version
    from servefit.errors import InvalidArgumentError

    if version is None:
        return DEFAULT_VLLM_VERSION
    newest = parse_version(DEFAULT_VLLM_VERSION)
    if parse_version(version) > newest:
        raise InvalidArgumentError(
            f"--vllm-version {version}: servefit mirrors vLLM 0.8 to {DEFAULT_VLLM_VERSION}; a "
            "later release may account differently. Plan with --vllm-version "
            f"{DEFAULT_VLLM_VERSION} and check the startup log (`servefit check-log`)"
        )
    return version


def kv_cache_bytes(text: str) -> int:
    """``--kv-cache-memory-bytes`` as vLLM reads it (``10G`` is 10 GiB, ``10g`` 10 GB), or
    with a unit servefit also accepts (``41.89GiB``, ``45GB``), as vLLM's startup log prints
    the KV memory in GiB."""
    from servefit.errors import InvalidArgumentError
    from servefit.units import parse_bytes, parse_human_int

    try:
        return parse_human_int(text, flag="--kv-cache-memory-bytes")
    except InvalidArgumentError:
        return parse_bytes(text)


def _lora_settings(enabled: bool, max_loras: int | None, max_lora_rank: int | None) -> Any:
    from servefit.core.lora import lora_settings

    return lora_settings(enabled, max_loras, max_lora_rank)
