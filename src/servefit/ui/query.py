"""The page's state as a query string, and the :class:`Deployment` it describes.

Every key is the CLI flag's name without the dashes (``max-model-len=32k`` is
``--max-model-len 32k``), so a permalink reads like the ``servefit plan`` line it stands for,
and the page's JSON export equals that line's ``--json``. Unknown keys, and anything that
could name a file on the server, are refused with a message naming the field: the page reads
no path from a request (a config.json comes as uploaded content, a run folder by the id the
CLI registered).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servefit.errors import InvalidArgumentError, ServefitError

# A Hugging Face id: org/name of letters, digits, '-', '_', '.' (no '..', no leading dot).
HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
UPLOAD_PREFIX = "upload:"
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
ENGINES = ("vllm", "sglang", "trtllm", "llama.cpp", "mlx")


class FieldError(InvalidArgumentError):
    """A request field the page cannot take: HTTP 400 with the field named."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _human_int(field: str, text: str) -> int:
    from servefit.units import parse_human_int

    return parse_human_int(text, flag=field)


def _int(field: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise FieldError(field, f"takes a whole number, got {text!r}") from None


def _float(field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FieldError(field, f"takes a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise FieldError(field, f"takes a positive finite number, got {text!r}")
    return value


def _bool(field: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "on", "yes"):
        return True
    if value in ("0", "false", "off", "no"):
        return False
    raise FieldError(field, f"takes true or false, got {text!r}")


def _choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(field: str, text: str) -> str:
        if text not in options:
            raise FieldError(field, f"takes one of {', '.join(options)}, got {text!r}")
        return text

    return parse


def _text(field: str, text: str) -> str:
    value = text.strip()
    if not value or len(value) > 200:
        raise FieldError(field, "takes 1 to 200 characters")
    return value


def _speculative(field: str, text: str) -> str:
    """vLLM's --speculative-config JSON, checked now (the page keeps the text); a draft
    ``model`` must be a Hub id: the page reads no file path."""
    from servefit.adapters.speculative_config import read_speculative_config

    if len(text) > 1000:
        raise FieldError(field, "takes at most 1,000 characters")
    try:
        sc = read_speculative_config(text)
    except InvalidArgumentError as error:
        raise FieldError(field, str(error)) from None
    if sc.model is not None:
        check_model_name(sc.model, field)
    return text.strip()


def _acceptance(field: str, text: str) -> float:
    value = _float(field, text)
    if value >= 1:
        raise FieldError(field, f"is a share of drafted tokens kept, below 1; got {text!r}")
    return value


def _image_size(field: str, text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX*]\s*(\d+)\s*", text)
    if not match:
        raise FieldError(field, f"give WIDTHxHEIGHT in pixels (1024x768), got {text!r}")
    return int(match.group(1)), int(match.group(2))


# query key -> parser; the keys are the CLI's flags without the leading dashes
FIELDS: dict[str, Callable[[str, str], Any]] = {
    "model": _text,
    "gpu": _text,
    "gpu-memory-gib": _float,
    "gpu-bandwidth-gbps": _float,
    "tensor-parallel-size": _int,
    "pipeline-parallel-size": _int,
    "data-parallel-size": _int,
    "max-model-len": _human_int,
    "max-num-seqs": _int,
    "max-num-batched-tokens": _human_int,
    "gpu-memory-utilization": _float,
    "kv-cache-dtype": _choice(KV_CACHE_DTYPES),
    "block-size": _int,
    "enable-prefix-caching": _bool,
    "enable-chunked-prefill": _bool,
    "enforce-eager": _bool,
    "enable-expert-parallel": _bool,
    "enable-lora": _bool,
    "max-loras": _int,
    "max-lora-rank": _int,
    "dtype": _choice(DTYPES),
    "quantization": _choice(("fp8",)),
    "speculative-config": _speculative,
    "acceptance-rate": _acceptance,
    "engine": _choice(ENGINES),
    "input-len": _human_int,
    "output-len": _human_int,
    "concurrency": _human_int,
    "request-rate": _float,
    "prefix-len": _human_int,
    "turns": _human_int,
    "image-size": _image_size,
    "images-per-request": _int,
    "context": _human_int,
    "target-concurrency": _human_int,
    "slo-ttft-ms": _float,
    "slo-tpot-ms": _float,
    "usd-per-gpu-hour": _float,
    "offline": _bool,
}
# keys of the page alone (which view, the comparison's lists, the open run): not a deployment
PAGE_KEYS = frozenset({"view", "compare-models", "compare-gpus", "run"})
WORKLOAD_KEYS = (
    *("input-len", "output-len", "concurrency", "request-rate", "prefix-len", "turns"),
    "image-size",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PageQuery:
    """A request's deployment fields, parsed and range-checked, keyed by flag name."""

    values: Mapping[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def model(self) -> str:
        return str(self.values["model"])


def parse_query(params: Mapping[str, str], *, page_keys: bool = False) -> PageQuery:
    """Parse and check every field; an empty value means "not given" (the CLI's default)."""
    values: dict[str, Any] = {}
    for key, text in params.items():
        if page_keys and key in PAGE_KEYS:
            continue
        parser = FIELDS.get(key)
        if parser is None:
            raise FieldError(key, "unknown field (the page takes the flags of `servefit plan`)")
        if not text.strip():
            continue
        try:
            values[key] = parser(key, text)
        except FieldError:
            raise
        except ServefitError as error:  # parse_human_int names the field itself
            raise FieldError(key, str(error).removeprefix(f"{key} ")) from None
    if "model" not in values:
        raise FieldError("model", "name a model (a catalog or Hub id, or drop a config.json)")
    check_model_name(values["model"])
    if values.get("gpu") is None and values.get("gpu-memory-gib") is None:
        raise FieldError("gpu", "pick a GPU, or describe one (memory and bandwidth)")
    if values.get("gpu", "").lower() in ("auto", "cpu", "host", "host-cpu"):
        raise FieldError("gpu", "the page plans catalog or custom devices, not this machine's")
    return PageQuery(values=values)


def check_model_name(model: str, field: str = "model") -> None:
    """A catalog or Hub id, or an uploaded config's id: never something naming a file on the
    server (the page reads no path from a request)."""
    if model.startswith(UPLOAD_PREFIX):
        if not re.fullmatch(r"[0-9a-f]{16}", model.removeprefix(UPLOAD_PREFIX)):
            raise FieldError(field, f"{model!r} is not an uploaded config's id")
        return
    if not HF_ID.fullmatch(model) or ".." in model:
        raise FieldError(
            field,
            f"{model!r} is not a Hugging Face id (org/name); the page reads no file paths: "
            "drop the config.json on the page instead",
        )
    if Path(model).exists():
        raise FieldError(
            field,
            f"{model!r} names a file or folder where the server runs; the page reads no "
            "file paths: drop the config.json on the page instead",
        )


def deployment_for(q: PageQuery, model: str | None = None) -> Any:
    """The :class:`Deployment` the query describes, built as ``servefit plan`` builds it from
    the same flags (the same defaults; the workload judged when any workload field is given)."""
    from servefit.app.deployment import CapacityTarget, Deployment, Hardware, default_workload
    from servefit.core.lora import lora_settings
    from servefit.core.metrics import Slo
    from servefit.core.plan import ServeSettings

    g = q.get
    settings = ServeSettings(
        tensor_parallel_size=g("tensor-parallel-size", 1),
        pipeline_parallel_size=g("pipeline-parallel-size", 1),
        data_parallel_size=g("data-parallel-size", 1),
        max_model_len=g("max-model-len"),
        max_num_seqs=g("max-num-seqs"),
        max_num_batched_tokens=g("max-num-batched-tokens"),
        gpu_memory_utilization=g("gpu-memory-utilization"),
        kv_cache_dtype=g("kv-cache-dtype", "auto"),
        block_size=g("block-size"),
        enable_prefix_caching=g("enable-prefix-caching"),  # left out: vLLM's default
        enable_chunked_prefill=g("enable-chunked-prefill"),
        enforce_eager=g("enforce-eager", False),
        enable_expert_parallel=g("enable-expert-parallel", False),
        lora=lora_settings(g("enable-lora", False), g("max-loras"), g("max-lora-rank")),
        dtype=g("dtype", "auto"),
        quantization=g("quantization"),
        speculative=_read_speculative(g("speculative-config")),
    )
    workload = default_workload(
        input_len=g("input-len", 1024),
        output_len=g("output-len", 256),
        concurrency=g("concurrency"),
        request_rate_per_s=g("request-rate"),
        prefix_len=g("prefix-len", 0),
        turns=g("turns", 1),
    )
    if g("target-concurrency") is not None and g("context") is None:
        raise FieldError("target-concurrency", "needs context (the tokens per request to hold)")
    from servefit.adapters.image_flags import image_vllm_args

    images = None
    if g("image-size") is not None:
        from servefit.core.image_tokens import ImageWorkload

        width, height = g("image-size")
        images = ImageWorkload(width=width, height=height, per_request=g("images-per-request", 1))
    elif g("images-per-request") is not None:
        raise FieldError("images-per-request", "needs image-size (the images' pixels)")
    slo = None
    if g("slo-ttft-ms") is not None or g("slo-tpot-ms") is not None:
        slo = Slo(ttft_ms=g("slo-ttft-ms"), tpot_ms=g("slo-tpot-ms"))
    return Deployment(
        model=model or q.model,
        hardware=Hardware(
            gpu=g("gpu"), memory_gib=g("gpu-memory-gib"), bandwidth_gb_per_s=g("gpu-bandwidth-gbps")
        ),
        settings=settings,
        workload=workload,
        is_workload_given=any(k in q.values for k in WORKLOAD_KEYS),
        target=(
            CapacityTarget(context_tokens=g("context"), concurrency=g("target-concurrency", 1))
            if g("context") is not None
            else None
        ),
        slo=slo,
        engine=g("engine"),
        allow_hub=not g("offline", False),
        acceptance_rate=g("acceptance-rate"),
        images=images,
        extra_args=image_vllm_args(images),
    )


def _read_speculative(text: str | None) -> Any:
    if text is None:
        return None
    from servefit.adapters.speculative_config import read_speculative_config

    return read_speculative_config(text)


def cli_args(q: PageQuery) -> list[str]:
    """The ``servefit plan`` arguments the query stands for (shown on the page)."""
    args = [q.model]
    for key, value in q.values.items():
        if key in ("model", "usd-per-gpu-hour"):  # the price is report's and cost's flag
            continue
        if key == "image-size":
            args += [f"--{key}", f"{value[0]}x{value[1]}"]
        elif isinstance(value, bool):
            if key in ("enable-prefix-caching", "enable-chunked-prefill"):
                args.append(f"--{key}" if value else f"--no-{key}")
            elif value:
                args.append(f"--{key}")
        else:
            args += [f"--{key}", str(value)]
    return args
