"""The options of engines other than vLLM, in their own spellings: a GGUF type to plan a
checkpoint as (llama.cpp), llama.cpp's ``--tensor-split``, and SGLang's names for the
settings servefit plans (``--mem-fraction-static``, ``--context-length``, ``--tp-size``,
``--max-running-requests``, ``--chunked-prefill-size``), so a ``sglang.launch_server`` line
is typed as SGLang takes it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from servefit.cli.types import FINITE_FLOAT, HUMAN_INT
from servefit.errors import InvalidArgumentError

GGUF_OPTION = click.option(
    "--gguf",
    metavar="TYPE",
    help="Plan the checkpoint as a GGUF file of this llama.cpp type (Q4_K_M, Q8_0, Q6_K, "
    "F16, ...): llama.cpp's engine by default.",
)


def _tensor_split(ctx: Any, param: Any, value: str | None) -> tuple[float, ...] | None:
    """``--tensor-split 3,1``: llama.cpp's ``-ts`` shares, one a GPU."""
    if value is None:
        return None
    try:
        shares = tuple(float(x) for x in value.replace("/", ",").split(","))
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: give one number a GPU, comma-separated (3,1)"
        ) from None
    if any(not x >= 0 or x == float("inf") for x in shares) or not any(shares):
        raise click.BadParameter(f"{value!r}: shares are finite, >= 0, and not all 0")
    return shares


TENSOR_SPLIT_OPTION = click.option(
    "--tensor-split",
    "-ts",
    metavar="A,B,...",
    callback=_tensor_split,
    help="llama.cpp: each GPU's share of the layers (its -ts), one value a GPU of "
    "--pipeline-parallel-size; default: equal shares (llama.cpp splits by free memory).",
)


# SGLang's flag -> (the ServeSettings field it sets, vLLM's flag for the same setting);
# docs.sglang.io "Server Arguments". SGLang's --mem-fraction-static is its own share (weights
# and pool of the memory free before loading), which the SGLang engine reads from the field
SGLANG_FLAGS = {
    "mem_fraction_static": ("gpu_memory_utilization", "--gpu-memory-utilization"),
    "context_length": ("max_model_len", "--max-model-len"),
    "tp_size": ("tensor_parallel_size", "--tensor-parallel-size"),
    "max_running_requests": ("max_num_seqs", "--max-num-seqs"),
    "chunked_prefill_size": ("max_num_batched_tokens", "--max-num-batched-tokens"),
}
SGLANG_OPTIONS = (
    click.option(
        "--mem-fraction-static",
        type=FINITE_FLOAT,
        help="SGLang: the share of memory for weights and the KV pool (its default by GPU).",
    ),
    click.option("--context-length", type=HUMAN_INT, help="SGLang: the longest request."),
    click.option("--tp-size", "--tp", "tp_size", type=int, help="SGLang: tensor parallelism."),
    click.option(
        "--dp-size",
        "--dp",
        "dp_size",
        type=click.IntRange(min=1),
        help="SGLang: data-parallel ranks (replicas; attention ranks with --enable-dp-attention).",
    ),
    click.option(
        "--enable-dp-attention",
        is_flag=True,
        default=None,
        help="SGLang: attention data-parallel over --dp-size ranks of the --tp-size GPUs, the "
        "experts over all of them (MoE models).",
    ),
    click.option("--max-running-requests", type=int, help="SGLang: requests running at once."),
    click.option("--chunked-prefill-size", type=HUMAN_INT, help="SGLang: prefill tokens per step."),
    click.option(
        "--speculative-algorithm",
        metavar="NAME",
        help="SGLang: EAGLE, EAGLE3, NEXTN (the checkpoint's MTP layers) or STANDALONE (a "
        "draft model).",
    ),
    click.option(
        "--speculative-draft-model-path", metavar="MODEL", help="SGLang: the draft checkpoint."
    ),
    click.option("--speculative-num-steps", type=int, help="SGLang: draft passes a step."),
    click.option("--speculative-eagle-topk", type=int, help="SGLang: branches a draft pass."),
    click.option(
        "--speculative-num-draft-tokens", type=int, help="SGLang: tokens verified a request."
    ),
    click.option(
        "--sglang-version",
        metavar="RELEASE",
        help="SGLang: the release whose defaults to plan with (0.3.6 on; default the newest).",
    ),
)


def sglang_options(command: Any) -> Any:
    """SGLang's spellings alone (check-log of an SGLang log)."""
    for option in SGLANG_OPTIONS:
        command = option(command)
    return command


N_GPU_LAYERS_OPTION = click.option(
    "--n-gpu-layers",
    "-ngl",
    type=click.IntRange(min=0),
    help="llama.cpp: offload the last N layers (its -ngl; the output layer is one of them); "
    "default all. The rest stay in host memory.",
)


def engine_options(command: Any) -> Any:
    """Every non-vLLM engine's option, on a command that describes a deployment."""
    for option in (GGUF_OPTION, TENSOR_SPLIT_OPTION, N_GPU_LAYERS_OPTION, *SGLANG_OPTIONS):
        command = option(command)
    return command


def apply_sglang_flags(flags: dict[str, Any], settings: Any, engine: str | None) -> Any:
    """SGLang's spellings into ``settings`` (and the engine: SGLang when none is named).
    Given beside vLLM's own flag for the same setting, or with another engine, they are a
    usage error that names both."""
    given: dict[str, Any] = {k: flags.pop(k) for k in SGLANG_FLAGS if flags.get(k) is not None}
    for k in SGLANG_FLAGS:
        flags.pop(k, None)
    speculation = _sglang_speculation(flags, settings)
    if speculation is not None:
        given["speculative"] = speculation
    dp, dp_attention = flags.pop("dp_size", None), flags.pop("enable_dp_attention", None)
    version = flags.pop("sglang_version", None)
    if version is not None:
        from servefit.core.engines.sglang import parse_sglang_version

        parse_sglang_version(version)  # a bad release is a usage error now, not at planning
        given["sglang_version"] = version
    if dp is not None or dp_attention:
        given["data_parallel"] = (dp, bool(dp_attention))
    if not given:
        return settings, engine
    spelled = ", ".join(
        {"speculative": "--speculative-algorithm", "data_parallel": "--dp-size"}.get(
            k, "--" + k.replace("_", "-")
        )
        for k in given
    )
    if engine is not None and engine.strip().lower() != "sglang":
        raise InvalidArgumentError(
            f"{spelled}: SGLang's flags; --engine {engine} takes vLLM's names instead"
        )
    defaults = type(settings)()
    changes = {}
    for key, value in given.items():
        if key == "speculative":
            changes["speculative"] = value
            continue
        if key == "data_parallel":
            continue  # below, once TP is known
        field, vllm_flag = SGLANG_FLAGS.get(key, (key, f"--{key.replace('_', '-')}"))
        current = getattr(settings, field)
        if current != getattr(defaults, field) and current != value:
            raise InvalidArgumentError(
                f"--{key.replace('_', '-')} {value} and {vllm_flag} {current} set the same "
                "setting: give one"
            )
        changes[field] = value
    settings = replace(settings, **changes)
    if "data_parallel" in given:
        settings = _sglang_data_parallel(settings, *given["data_parallel"])
    return settings, "sglang"


def _sglang_data_parallel(settings: Any, dp: int | None, dp_attention: bool) -> Any:
    """SGLang's --dp-size: replicas of --tp-size GPUs each, or, with --enable-dp-attention,
    attention ranks within the --tp-size GPUs (planned as DP x EP: each rank's attention and
    KV whole, the experts over every GPU)."""
    if not dp_attention:
        return replace(settings, data_parallel_size=dp or 1)
    tp = settings.tensor_parallel_size
    if dp is None or dp < 2 or tp % dp:
        raise InvalidArgumentError(
            f"--enable-dp-attention needs --dp-size of 2 or more dividing --tp-size {tp} "
            f"(got --dp-size {dp}): SGLang splits the --tp-size GPUs into attention ranks"
        )
    return replace(
        settings,
        tensor_parallel_size=tp // dp,
        data_parallel_size=dp,
        enable_expert_parallel=True,
        sglang_dp_attention=True,
    )


_SPECULATIVE_KEYS = (
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)


def _sglang_speculation(flags: dict[str, Any], settings: Any) -> Any:
    """SGLang's speculative flags as the config servefit plans (None when none is given).
    Beside vLLM's --speculative-config, or without --speculative-algorithm, they are a
    usage error that names what to give."""
    values = {k: flags.pop(k, None) for k in _SPECULATIVE_KEYS}
    given = [k for k, v in values.items() if v is not None]
    if not given:
        return None
    if values["speculative_algorithm"] is None:
        raise InvalidArgumentError(
            f"--{given[0].replace('_', '-')} needs --speculative-algorithm (EAGLE, EAGLE3, "
            "NEXTN or STANDALONE)"
        )
    if getattr(settings, "speculative", None) is not None:
        raise InvalidArgumentError(
            "--speculative-algorithm (SGLang) and --speculative-config (vLLM) both describe "
            "speculative decoding: give the one of the engine you run"
        )
    from servefit.core.engines.sglang_spec import sglang_speculative_config

    algorithm = str(values["speculative_algorithm"])
    return sglang_speculative_config(
        algorithm,
        draft_model_path=values["speculative_draft_model_path"],
        num_steps=values["speculative_num_steps"],
        eagle_topk=values["speculative_eagle_topk"],
        num_draft_tokens=values["speculative_num_draft_tokens"],
    )
