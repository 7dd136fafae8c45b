"""vLLM's parsed arguments as :class:`~servefit.core.plan.ServeSettings` fields: one table for
every reader of a vLLM line. The offline command-line reader and vLLM's own parser
(``preflight/``) and a start-up log's "non-default args" (``check-log``) all leave the
arguments as vLLM's argparse destinations (``max_model_len``, ``speculative_config``, ...,
None for a default); :func:`serve_fields` turns them into the settings servefit plans."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# vLLM destinations taken as they are: the ServeSettings field of the same name
DIRECT = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "kv_cache_memory_bytes",
    "block_size",
    "mamba_ssm_cache_dtype",
    "dtype",
    "quantization",
    "enable_prefix_caching",
    "enforce_eager",
    "enable_expert_parallel",
    "enable_chunked_prefill",
)
# destinations folded into one ServeSettings field of another name
FIELD_OF = {
    "speculative_config": "speculative",
    "enable_lora": "lora",
    "max_loras": "lora",
    "max_lora_rank": "lora",
}
DESTS = (*DIRECT, *FIELD_OF)


def serve_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ServeSettings keyword arguments of vLLM's parsed arguments (a destination left
    at None is vLLM's default, left out)."""
    out = {key: values[key] for key in DIRECT if values.get(key) is not None}
    speculative = values.get("speculative_config")
    if isinstance(speculative, str | dict):  # the flag's JSON text, or the dict vLLM parsed
        from servefit.adapters.speculative_config import read_speculative_config

        out["speculative"] = read_speculative_config(speculative)
    if values.get("enable_lora") is True:
        from servefit.core.lora import LoraSettings

        sizes = {
            k: values[k] for k in ("max_loras", "max_lora_rank") if isinstance(values.get(k), int)
        }
        out["lora"] = LoraSettings(**sizes)
    return out
