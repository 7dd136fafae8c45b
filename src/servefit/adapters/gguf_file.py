"""A ``.gguf`` file as a model: its header and tensor table, read with the ``gguf`` package
that llama.cpp maintains (gguf-py); the weights are never loaded.

The header's metadata gives the architecture (``general.architecture``) and its
hyperparameters under that name (``{arch}.block_count``, ``.embedding_length``,
``.feed_forward_length``, ``.attention.head_count``, ``.attention.head_count_kv``,
``.attention.key_length``, ``.context_length``, ``.rope.freq_base``, ``.expert_count``,
``.expert_used_count``, ``.expert_feed_forward_length``: the keys llama.cpp's
``convert_hf_to_gguf.py`` writes), turned into the Hugging Face config fields servefit reads.
The tensor table gives each tensor's exact bytes (``n_bytes``, K-quant mixes included) and its
layer (``blk.N.``); the vocabulary is the token embedding's rows and a missing ``output.weight``
means the LM head is tied to it. A split file (``-00001-of-00003.gguf``) is read whole: the
header from the first part, the tensors from every part.

``pip install 'servefit[gguf]'`` brings the reader.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from servefit.core.model_spec import FileTensor
from servefit.errors import ConfigError, InvalidArgumentError

# general.architecture -> (the Hugging Face architecture, model_type) servefit plans it as
ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
}
# {arch}.<key> -> the config.json field
_FIELDS = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "context_length": "max_position_embeddings",
    "rope.freq_base": "rope_theta",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
}
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")
_LAYER = re.compile(r"^blk\.(\d+)\.")
GGUF_NAME = "GGUF"


def is_gguf_path(path: Path) -> bool:
    return path.suffix.lower() == ".gguf"


def _reader(path: Path) -> Any:
    try:
        from gguf import GGUFReader
    except ImportError:
        raise InvalidArgumentError(
            f"{path}: reading a GGUF file needs the gguf package: pip install 'servefit[gguf]'"
        ) from None
    try:
        return GGUFReader(path, "r")
    except Exception as exc:  # a third-party parser on any bytes: every failure is the file's
        raise ConfigError(
            f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})"
        ) from None


def parts_of(path: Path) -> list[Path]:
    """The files of a GGUF (every part of a split one, in order)."""
    m = _SPLIT.match(path.name)
    if m is None:
        return [path]
    count = int(m.group("count"))
    parts = [
        path.with_name(f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf")
        for i in range(1, count + 1)
    ]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise InvalidArgumentError(f"{path}: split GGUF parts missing: {', '.join(missing)}")
    return parts


def _value(reader: Any, key: str) -> Any:
    try:
        field = reader.get_field(key)
        return None if field is None else field.contents()
    except Exception as exc:  # a malformed metadata value
        raise ConfigError(f"GGUF metadata {key}: unreadable ({type(exc).__name__})") from None


def read_gguf(path: Path) -> tuple[dict[str, Any], tuple[FileTensor, ...], dict[str, int]]:
    """(the config.json fields the header states, the tensor table, tensor count by GGML type)."""
    parts = parts_of(path)
    first = _reader(parts[0])
    arch = _value(first, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ConfigError(
            f"{path}: GGUF architecture {arch!r} is not one servefit plans from a GGUF header "
            f"({', '.join(ARCHITECTURES)}); plan the checkpoint's config.json with --gguf TYPE"
        )
    hf_arch, model_type = ARCHITECTURES[arch]
    config: dict[str, Any] = {"architectures": [hf_arch], "model_type": model_type}
    for key, name in _FIELDS.items():
        value = _value(first, f"{arch}.{key}")
        if isinstance(value, list):  # per-layer values (head_count_kv of some models)
            if len(set(value)) > 1:
                raise ConfigError(f"{path}: {arch}.{key} varies by layer, not modelled")
            value = value[0]
        if value is not None:
            config[name] = value
    tensors: list[FileTensor] = []
    types: Counter[str] = Counter()
    shapes: dict[str, list[int]] = {}
    for part in parts:
        reader = first if part == parts[0] else _reader(part)
        for t in reader.tensors:
            layer = _LAYER.match(t.name)
            tensors.append(
                FileTensor(
                    name=t.name,
                    layer=int(layer.group(1)) if layer else None,
                    num_bytes=int(t.n_bytes),
                )
            )
            shapes[t.name] = [int(x) for x in t.shape]
            if len(t.shape) >= 2:
                types[t.tensor_type.name] += 1
    embedding = shapes.get("token_embd.weight")
    if embedding is None:
        raise ConfigError(f"{path}: no token_embd.weight tensor")
    config["vocab_size"] = embedding[1]  # GGML order: [n_embd, n_vocab]
    config["tie_word_embeddings"] = "output.weight" not in shapes
    config["torch_dtype"] = "float16"  # llama.cpp computes in fp16/fp32
    if model_type == "qwen3_moe":
        config.setdefault("decoder_sparse_step", 1)
        config.setdefault("mlp_only_layers", [])
    return config, tuple(tensors), dict(types)


def dominant_type(types: dict[str, int]) -> str:
    """The GGML type most of the file's matrices are stored in (Q4_K for a Q4_K_M file)."""
    return max(types, key=lambda k: (types[k], k)) if types else "F16"


def file_type_name(path: Path, types: dict[str, int]) -> str:
    """llama-quantize's name of the file's type (``general.file_type``: Q4_K_M), else the
    dominant tensor type."""
    try:
        from gguf import LlamaFileType
    except ImportError:  # an older gguf package
        return dominant_type(types)
    value = _value(_reader(parts_of(path)[0]), "general.file_type")
    try:
        return (
            LlamaFileType(int(value)).name.removeprefix("MOSTLY_")
            if value is not None
            else (dominant_type(types))
        )
    except ValueError:
        return dominant_type(types)


def gguf_spec(path: Path) -> tuple[Any, int]:
    """The GGUF file's :class:`~servefit.core.model_spec.ModelSpec` (its header, every weight
    in one GGUF format whose bits per weight are the file's own average, for the speed model;
    the tensor table, for exact capacity) and the file's tensor bytes."""
    from dataclasses import replace

    from servefit.core.hf_config import spec_from_hf_config
    from servefit.core.quant import uniform_quant
    from servefit.core.quant_formats import WeightFormat
    from servefit.core.weights import count_params

    config, tensors, types = read_gguf(path)
    spec = spec_from_hf_config(config, name=str(path))
    kind = file_type_name(path, types)
    file_bytes = sum(t.num_bytes for t in tensors)
    bits = file_bytes * 8 / count_params(spec).total
    fmt = WeightFormat(name=f"gguf-{kind.lower()}", bits=bits, compute_dtype="fp16", scale_bytes=0)
    quant = uniform_quant(fmt, method=f"gguf {kind}", include_embedding=True)
    return replace(spec, quant=quant, file_tensors=tensors), file_bytes
