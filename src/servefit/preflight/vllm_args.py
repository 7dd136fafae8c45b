"""Read the model and the flags that matter from a vLLM command line, so nothing is
written twice: ``servefit preflight --from-vllm-args -- vllm serve MODEL --tensor-parallel-size 2``.

Understands ``vllm serve MODEL``, ``vllm serve --model MODEL`` and
``python -m vllm.entrypoints.openai.api_server --model MODEL``, with ``--flag value`` and
``--flag=value`` spellings. Flags servefit does not model are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servefit.errors import InvalidArgumentError
from servefit.units import parse_bytes

# vLLM flag -> (ServeSettings field, converter)
_VALUE_FLAGS: dict[str, tuple[str, Any]] = {
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "-tp": ("tensor_parallel_size", int),
    "--pipeline-parallel-size": ("pipeline_parallel_size", int),
    "-pp": ("pipeline_parallel_size", int),
    "--max-model-len": ("max_model_len", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", parse_bytes),
    "--kv-cache-memory": ("kv_cache_memory_bytes", parse_bytes),
    "--block-size": ("block_size", int),
    "--dtype": ("dtype", str),
    "--quantization": ("quantization", str),
    "-q": ("quantization", str),
}
_SWITCHES: dict[str, tuple[str, bool]] = {
    "--enforce-eager": ("enforce_eager", True),
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmCommand:
    model: str
    settings: dict[str, Any] = field(default_factory=dict)  # ServeSettings keyword arguments


def parse_vllm_command(args: list[str]) -> VllmCommand:
    """The model and servefit-relevant settings of a ``vllm serve`` command line."""
    rest = list(args)
    if len(rest) >= 2 and rest[0].endswith("vllm") and rest[1] == "serve":
        rest = rest[2:]
    elif "-m" in rest and any(a.startswith("vllm.") for a in rest):
        rest = rest[rest.index("-m") + 2 :]
    else:
        raise InvalidArgumentError(
            f"--from-vllm-args expects `vllm serve MODEL ...` or `python -m "
            f"vllm.entrypoints.openai.api_server --model MODEL ...`, got: {' '.join(args)[:120]}"
        )
    model: str | None = None
    settings: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        arg = rest[i]
        flag, eq, inline = arg.partition("=")
        if flag in ("--model", "--model-tag"):
            model = inline if eq else _next(rest, i, flag)
            i += 1 if eq else 2
        elif flag in _VALUE_FLAGS:
            key, convert = _VALUE_FLAGS[flag]
            raw = inline if eq else _next(rest, i, flag)
            try:
                settings[key] = convert(raw)
            except ValueError:
                raise InvalidArgumentError(f"vLLM flag {flag} has a bad value {raw!r}") from None
            i += 1 if eq else 2
        elif flag in _SWITCHES:
            key, value = _SWITCHES[flag]
            settings[key] = value
            i += 1
        elif not arg.startswith("-") and model is None:
            model = arg
            i += 1
        else:
            i += 1  # a flag servefit does not model (its value, if any, is skipped next round)
    if model is None:
        raise InvalidArgumentError("the vLLM command names no model")
    return VllmCommand(model=model, settings=settings)


def _next(args: list[str], i: int, flag: str) -> str:
    if i + 1 >= len(args):
        raise InvalidArgumentError(f"vLLM flag {flag} has no value")
    return args[i + 1]
