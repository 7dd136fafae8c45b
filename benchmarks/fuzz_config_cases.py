"""The config cases of ``benchmarks/fuzz.py``: the hostile values, the bundled configs they
start from (:func:`seeds`) and one mutation of one of them (:func:`mutate`), drawn from a
:class:`Chooser` (``random.Random`` in the benchmark, Hypothesis in
``tests/property/test_fuzz_configs.py``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

HUGE_INT = "9" * 5000  # beyond Python's 4,300-digit int parsing limit
DEEP = 100_000  # nesting depth


class Chooser(Protocol):
    """Where the randomness comes from: ``random.Random`` here, Hypothesis in the tests."""

    def choice(self, seq: Sequence[Any]) -> Any: ...

    def random(self) -> float: ...


# -- configs ------------------------------------------------------------------------------

# Raw-JSON values (inserted as text, so NaN, 5,000-digit integers and deep nesting get in).
NUMBERS: tuple[str, ...] = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e308",
    "-1e308",
    "1e18",
    "9223372036854775808",
    HUGE_INT,
    "-1",
    "0",
    "-64",
    "0.5",
    "3.5",
    "1e-300",
    "2.0",
)
OTHERS: tuple[str, ...] = ("true", "false", "null", '""', '"x"', '"64"', "[]", "{}", "[1, 2]")
NESTED = "[" * DEEP + "]" * DEEP
VALUES = (*NUMBERS, *OTHERS, NESTED)

# Fields servefit reads as integer counts (positive unless listed in ZERO_OK), and the
# fields that change the size of the model when they change.
INT_FIELDS = frozenset(
    {
        "num_hidden_layers",
        "hidden_size",
        "vocab_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "intermediate_size",
        "max_position_embeddings",
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "moe_intermediate_size",
        "num_experts_per_tok",
        "n_shared_experts",
        "shared_expert_intermediate_size",
        "first_k_dense_replace",
        "moe_layer_freq",
        "decoder_sparse_step",
        "kv_lora_rank",
        "q_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "full_attention_interval",
        "linear_num_value_heads",
        "linear_num_key_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
        "attn_layer_period",
        "attn_layer_offset",
        "expert_layer_period",
        "expert_layer_offset",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_expand",
        "mamba_dt_rank",
        "mamba_num_heads",
        "mamba_head_dim",
        "ssm_state_size",
        "sliding_window_pattern",
        "attention_chunk_size",
        "interleave_moe_layer_step",
        "num_nextn_predict_layers",
        "mtp_num_hidden_layers",
        "n_groups",
        "conv_kernel",
        "max_window_layers",
        "intermediate_size_mlp",
        "moe_shared_expert_intermediate_size",
    }
)
ZERO_OK = frozenset(
    {
        "n_shared_experts",
        "shared_expert_intermediate_size",
        "first_k_dense_replace",
        "num_nextn_predict_layers",
        "mtp_num_hidden_layers",
        "attn_layer_offset",
        "expert_layer_offset",
        "max_window_layers",
        "n_routed_experts",
        "num_experts",
        "moe_shared_expert_intermediate_size",
        "sliding_window",
    }
)
SIZE_WORDS = re.compile(
    r"size|layers|heads|dim|experts|rank|interval|freq|step|replace|period|offset|pattern|"
    r"state|expand|conv|kernel|groups|vocab|types|model_type|text_config|vision_config|depth|"
    r"num_|tok|act|tie|bias|gate"
)
INSERTABLE = (
    "head_dim",
    "num_key_value_heads",
    "sliding_window",
    "partial_rotary_factor",
    "max_position_embeddings",
    "architectures",
    "layer_types",
    "mlp_only_layers",
    "vision_config",
    "quantization_config",
    "rope_parameters",
)
QUANT_TEMPLATES: tuple[dict[str, Any], ...] = (
    {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False},
    {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
    {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
    {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
            }
        },
        "ignore": ["lm_head"],
    },
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    {"quant_method": "mxfp4", "modules_to_not_convert": ["router"]},
    {"bits": 4, "group_size": 64},  # MLX
)
QUANT_FILES: tuple[str, ...] = (
    '{"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}',
    '{"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}',
    '{"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": '
    '{"model.layers.0.mlp": {"quant_algo": "NVFP4", "group_size": 16}}}}',
)
INDEX_FILES: tuple[str, ...] = (
    '{"metadata": "x"}',
    '{"metadata": {"total_size": -5}}',
    '{"metadata": {"total_size": NaN}}',
    '{"metadata": {"total_size": 1e30}}',
    '{"metadata": {"total_size": ' + HUGE_INT + "}}",
    '{"metadata": {"total_size": "16000000000"}}',
    '{"metadata": {"total_size": true}}',
    "[]",
    '"x"',
    '{"metadata": {"total_size": 16000000000}, "weight_map": {}}',
    '{"metadata": {"total_size": 16000000000}',  # truncated
)
ENCODINGS = ("utf-16", "utf-16-le", "utf-8-sig", "latin-1", "cp1252", "utf-32", "bytes")


@dataclass
class ConfigCase:
    """One mutated model directory."""

    model_id: str
    files: dict[str, bytes]
    description: str
    is_size_changed: bool = False  # parameters may move by more than 2x
    is_bad_value: bool = False  # a value servefit reads was made wrong: it must be refused


@dataclass
class Seed:
    model_id: str
    config: dict[str, Any]
    hf_quant_config: dict[str, Any] | None
    params_total: int | None = None  # of the unmutated config (None: it does not plan here)


def seeds() -> list[Seed]:
    from servefit.adapters.catalog import find_catalog_model, model_ids

    out = []
    for model_id in model_ids():
        entry = find_catalog_model(model_id)
        assert entry is not None
        out.append(Seed(model_id, dict(entry.config), entry.hf_quant_config))
    return out


def _containers(config: dict[str, Any]) -> list[tuple[str, ...]]:
    """Paths of the objects a mutation may touch: the config and its nested blocks."""
    paths: list[tuple[str, ...]] = [()]
    for key in ("text_config", "vision_config", "quantization_config", "rope_scaling"):
        if isinstance(config.get(key), dict):
            paths.append((key,))
    text = config.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("quantization_config"), dict):
        paths.append(("text_config", "quantization_config"))
    return paths


def _at(config: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node = config
    for key in path:
        node = node[key]
    return node


# list fields -> the replacement values that stay valid
LIST_FIELDS = {
    "layer_types": ("null",),
    "mlp_only_layers": ("null", "[]", "[1, 2]"),
    "architectures": ("null", "[]"),
}
QUANT_BITS = {2, 3, 4, 8}


def _is_bad_quant(key: str, raw: str) -> bool:
    """Is ``raw`` a value a quantization block must not be accepted with?"""
    if key not in ("bits", "group_size") or raw == "null":
        return False
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return True
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return True
    if value != int(value):
        return True
    if key == "bits":
        return value not in QUANT_BITS
    return value == 0 or value < -1 or value > 2**20


def _is_bad_for(key: str, raw: str) -> bool:
    """Is ``raw`` a value servefit must refuse in field ``key``?"""
    if key == "partial_rotary_factor":
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            return True
        if value is None:
            return False
        if isinstance(value, bool) or not isinstance(value, int | float):
            return True
        return not 0 < value <= 1
    if key in LIST_FIELDS:
        return raw not in LIST_FIELDS[key]
    if key not in INT_FIELDS and key != "sliding_window":
        return False
    if raw == "null":
        return False
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return True  # a 5,000-digit integer, 100,000-deep nesting
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True
    if not math.isfinite(value) or value != int(value) or value < 0 or value >= 1e15:
        return True
    return value == 0 and key not in ZERO_OK


def mutate(seed: Seed, pick: Chooser) -> ConfigCase:
    """One mutated copy of ``seed``: 1-3 value mutations, or a file-level one."""
    config = json.loads(json.dumps(seed.config))
    raws: dict[str, str] = {}  # sentinel -> raw JSON text
    notes: list[str] = []
    case = ConfigCase(seed.model_id, {}, "")
    extra: dict[str, bytes] = {}
    if seed.hf_quant_config is not None:
        extra["hf_quant_config.json"] = json.dumps(seed.hf_quant_config).encode()
    kind = pick.choice(("value", "value", "value", "value", "delete", "insert", "quant", "file"))
    bad: dict[str, bool] = {}  # per field: the last mutation of a field is the one read
    encoding = None
    if kind == "file":
        what = pick.choice(("encoding", "encoding", "index", "quantfile", "shape"))
        if what == "encoding":
            encoding = pick.choice(ENCODINGS)
            notes.append(f"encoded {encoding}")
        elif what == "index":
            extra["model.safetensors.index.json"] = pick.choice(INDEX_FILES).encode()
            notes.append("junk safetensors index")
        elif what == "quantfile":
            text = pick.choice(QUANT_FILES)
            key = pick.choice(
                ("quant_algo", "group_size", "exclude_modules", "kv_cache_quant_algo")
            )
            value = pick.choice(VALUES)
            document = json.loads(text)
            document["quantization"][key] = "\0RAW0\0"
            text = json.dumps(document).replace('"\\u0000RAW0\\u0000"', value)
            extra["hf_quant_config.json"] = text.encode()
            notes.append(f"hf_quant_config {key}={value[:20]}")
        else:
            shape = pick.choice(("[]", "1", '"x"', "null", "", "{", "{}", "[{}]"))
            case.files = {"config.json": shape.encode(), **extra}
            case.description = f"config.json is {shape!r}"
            return case
    else:
        for _ in range(pick.choice((1, 1, 1, 2, 3))):
            path = pick.choice(_containers(config))
            node = _at(config, path)
            if kind == "quant":
                template = json.loads(json.dumps(pick.choice(QUANT_TEMPLATES)))
                key = pick.choice(sorted(template))
                sentinel = f"\0RAW{len(raws)}\0"
                raws[sentinel] = pick.choice(VALUES)
                template[key] = sentinel
                config["quantization_config"] = template
                notes.append(f"quantization_config.{key}={raws[sentinel][:20]}")
                text = config.get("text_config")
                is_read = seed.hf_quant_config is None and not (
                    isinstance(text, dict) and "quantization_config" in text
                )
                bad["quantization_config"] = is_read and _is_bad_quant(key, raws[sentinel])
                continue
            if kind == "insert":
                key = pick.choice(INSERTABLE)
            else:
                keys = sorted(node)
                if not keys:
                    continue
                key = pick.choice(keys)
            label = ".".join((*path, key))
            if kind == "delete":
                node.pop(key, None)
                notes.append(f"del {label}")
                bad[label] = False
                case.is_size_changed |= bool(SIZE_WORDS.search(key)) or bool(path)
                continue
            current = node.get(key)
            if (
                isinstance(current, int | float)
                and not isinstance(current, bool)
                and pick.random() < 0.3
            ):
                factor = pick.choice((2, 0.5, 10, 1000, -1, 0))
                raw = json.dumps(int(current * factor))
            elif isinstance(current, str) and pick.random() < 0.2:
                raw = json.dumps(pick.choice((current + "_x", current.upper(), "")))
            else:
                raw = pick.choice(VALUES)
            sentinel = f"\0RAW{len(raws)}\0"
            raws[sentinel] = raw
            node[key] = sentinel
            notes.append(f"{label}={raw[:20]}")
            case.is_size_changed |= bool(SIZE_WORDS.search(key)) or path == ("vision_config",)
            text_path = ("text_config",) if isinstance(config.get("text_config"), dict) else ()
            where_read = path == (() if key == "architectures" else text_path)
            bad[label] = where_read and _is_bad_for(key, raw)
    case.is_bad_value = any(bad.values())
    text = json.dumps(config, indent=1)
    for sentinel, raw in raws.items():
        text = text.replace(json.dumps(sentinel), raw)
    data = _encode(text, encoding, pick)
    case.files = {"config.json": data, **extra}
    case.description = "; ".join(notes) or "unchanged"
    return case


def _encode(text: str, encoding: str | None, pick: Chooser) -> bytes:
    if encoding is None:
        return text.encode()
    if encoding in ("latin-1", "cp1252"):  # a non-ASCII character, as an editor might add
        text = text.replace('"model_type"', '"_comment": "café", "model_type"', 1)
        return text.encode(encoding)
    if encoding == "bytes":
        data = bytearray(text.encode())
        at = int(pick.random() * len(data))
        return bytes(data[:at]) + pick.choice((b"\xff\xfe", b"\x00", b"\xc3", b"\x80\x80"))
    return text.encode(encoding)
