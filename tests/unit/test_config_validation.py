"""Every config value servefit reads is typed and range-checked at the edge: each reproducer
of issue 17 (a crash, a hang or an absurd plan before) is a ConfigError naming the field."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import ClassVar

import pytest

from servefit.adapters.catalog import find_catalog_model, model_ids
from servefit.adapters.model_source import load_model
from servefit.core.hf_config import spec_from_hf_config
from servefit.core.hf_fields import FIELD_LIMITS, Fields
from servefit.errors import ConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "model.md"


def config(model_id: str) -> dict:
    entry = find_catalog_model(model_id)
    assert entry is not None
    return copy.deepcopy(entry.config)


def refused(cfg: dict, match: str, **kwargs) -> None:
    with pytest.raises(ConfigError, match=match):
        spec_from_hf_config(cfg, name="x", **kwargs)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("num_hidden_layers", float("nan"), "num_hidden_layers must be an integer, got NaN"),
        ("hidden_size", 1e308, "hidden_size must be an integer"),
        ("num_hidden_layers", 1e18, "num_hidden_layers must be an integer"),
        ("num_hidden_layers", 10**18, "num_hidden_layers must be at most 1,000"),
        ("num_hidden_layers", True, "must be an integer, got True \\(a boolean\\)"),
        ("num_hidden_layers", 32.0, "write 32: a count is a JSON integer"),
        ("num_hidden_layers", "32", "must be an integer"),
        ("num_attention_heads", 0, "num_attention_heads must be positive"),
        ("num_key_value_heads", 0, "num_key_value_heads must be positive"),
        ("max_position_embeddings", 0, "max_position_embeddings must be positive"),
        ("max_position_embeddings", -64, "max_position_embeddings must be positive"),
        ("max_position_embeddings", 2**30, "at most 16,777,216"),
        ("vocab_size", 0, "vocab_size must be positive"),
        ("sliding_window", "x", "sliding_window must be an integer"),
        ("sliding_window", -5, "sliding_window must be at least 0"),
        # a count wherever a config carries it, though Llama's layers do not use it (the
        # config fuzzer's SmolLM3 case): "x" is refused, not planned around
        ("max_window_layers", "x", "max_window_layers must be an integer"),
        ("max_window_layers", False, "max_window_layers must be an integer"),
        ("partial_rotary_factor", "x", "partial_rotary_factor must be a number"),
        ("partial_rotary_factor", 2.0, "partial_rotary_factor must be in \\(0, 1\\]"),
        ("partial_rotary_factor", float("nan"), "partial_rotary_factor must be in"),
        ("architectures", "LlamaForCausalLM", "architectures must be a list"),
        ("layer_types", "full_attention", "layer_types must be a list of strings"),
        ("torch_dtype", "int3", "torch_dtype 'int3' is not a dtype"),
        ("tie_word_embeddings", "yes", "tie_word_embeddings must be true or false"),
        ("quantization_config", "fp8", "quantization_config must be a JSON object"),
        ("text_config", "x", "text_config must be an object"),
    ],
)
def test_a_wrong_value_in_a_field_is_refused_naming_it(field, value, match):
    cfg = config("meta-llama/Llama-3.1-8B")
    cfg[field] = value
    refused(cfg, match)


def test_moe_layer_freq_below_one_is_refused_not_planned_dense():
    cfg = config("moonshotai/Kimi-K2-Instruct")
    cfg["moe_layer_freq"] = -64  # planned 3.3e10 parameters that "fit" one H100
    refused(cfg, "moe_layer_freq must be positive")


def test_mlp_only_layers_must_be_layer_indices():
    cfg = config("Qwen/Qwen3-30B-A3B")
    cfg["mlp_only_layers"] = "1"
    refused(cfg, "mlp_only_layers must be a list of layer indices")
    cfg["mlp_only_layers"] = [-1]
    refused(cfg, "mlp_only_layers must be at least 0")


def test_vision_config_fields_are_typed():
    cfg = config("Qwen/Qwen3-VL-8B-Instruct")
    cfg["vision_config"]["depth"] = "27"
    refused(cfg, "vision_config: depth must be an integer")
    cfg = config("Qwen/Qwen3-VL-8B-Instruct")
    cfg["vision_config"]["spatial_merge_size"] = 0
    refused(cfg, "spatial_merge_size must be positive")
    cfg = config("Qwen/Qwen3-VL-8B-Instruct")
    cfg["vision_config"] = [1]
    refused(cfg, "vision_config must be an object")


def test_a_model_beyond_1e14_parameters_is_refused():
    cfg = config("meta-llama/Llama-3.1-8B")
    cfg.update(hidden_size=2**17, intermediate_size=2**20, num_hidden_layers=1000)
    cfg.update(num_attention_heads=1024, num_key_value_heads=8)
    refused(cfg, "parameters, beyond the 1e\\+14")


@pytest.mark.parametrize(
    ("quant", "match"),
    [
        ({"quant_method": "gptq", "bits": None}, "bits must be an integer bit width, got null"),
        ({"quant_method": "gptq", "bits": 3.5}, "bits must be an integer bit width"),
        ({"quant_method": "awq", "bits": 4, "group_size": 0}, "group_size = 0"),
        ({"quant_method": "gptq", "bits": 4, "group_size": "128"}, "group_size must be an"),
        ({"quant_method": "fp8", "weight_block_size": [0, 128]}, "two block sizes"),
        ({"quant_method": "fp8", "weight_block_size": True}, "two block sizes"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"targets": "Linear", "weights": {"num_bits": 4}}},
            },
            "targets must be a list of module names",
        ),
        ({"quant_method": "compressed-tensors", "config_groups": 5}, "must be a JSON object"),
        ({"quant_method": "bitsandbytes", "load_in_4bit": "yes"}, "true or false"),
        ({"quant_method": "fp8", "modules_to_not_convert": "lm_head"}, "list of module names"),
        ({"bits": 4, "group_size": 0}, "group_size = 0"),  # MLX
    ],
)
def test_a_quantization_config_of_the_wrong_type_is_refused(quant, match):
    cfg = config("meta-llama/Llama-3.1-8B")
    cfg["quantization_config"] = quant
    refused(cfg, match)


def test_hf_quant_config_of_the_wrong_type_is_refused():
    cfg = config("meta-llama/Llama-3.1-8B")
    refused(cfg, "quantization must be a JSON object", hf_quant_config={"quantization": "fp8"})
    refused(cfg, "hf_quant_config.json must be a JSON object", hf_quant_config=[1])


def _model_dir(tmp_path: Path, data: bytes, index: str | None = None) -> str:
    (tmp_path / "config.json").write_bytes(data)
    if index is not None:
        (tmp_path / "model.safetensors.index.json").write_text(index)
    return str(tmp_path)


LLAMA = json.dumps(config("meta-llama/Llama-3.1-8B"))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (LLAMA.encode("utf-16"), "the file is UTF-16"),
        (LLAMA.encode("utf-16-le"), "looks like UTF-16 or UTF-32"),
        (LLAMA.encode("utf-32"), "the file is UTF-32"),
        (b"\xef\xbb\xbf" + LLAMA.encode(), "UTF-8 with a byte-order mark"),
        (LLAMA.replace('"llama"', '"llama", "c": "caf\u00e9"').encode("latin-1"), "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[" * 40 + b"]" * 40, "nested more than 32 levels"),
        (b'{"hidden_size": ' + b"9" * 5000 + b"}", "an integer of 5,000 digits"),
        (b"", "not valid JSON"),
        (b"[]", "config.json must be a JSON object"),
    ],
)
def test_a_config_file_that_cannot_be_decoded_is_a_config_error(tmp_path, data, match):
    with pytest.raises(ConfigError, match=match):
        load_model(_model_dir(tmp_path, data), allow_hub=False)


@pytest.mark.parametrize(
    ("index", "match"),
    [
        ('{"metadata": "x"}', "metadata must be a JSON object"),
        ('{"metadata": {"total_size": -5}}', "total_size must be 1 to"),
        ('{"metadata": {"total_size": NaN}}', "total_size must be bytes"),
        ('{"metadata": {"total_size": "16"}}', "total_size must be bytes"),
        ('{"metadata": {"total_size": 1e30}}', "total_size must be 1 to"),
        ("[]", "a safetensors index must be a JSON object"),
    ],
)
def test_a_junk_safetensors_index_is_a_config_error(tmp_path, index, match):
    with pytest.raises(ConfigError, match=match):
        load_model(_model_dir(tmp_path, LLAMA.encode(), index), allow_hub=False)


def test_a_valid_safetensors_index_gives_the_checkpoint_size(tmp_path):
    index = '{"metadata": {"total_size": 16060522496}, "weight_map": {}}'
    loaded = load_model(_model_dir(tmp_path, LLAMA.encode(), index), allow_hub=False)
    assert loaded.checkpoint_bytes == 16_060_522_496


class _Recording(Fields):
    names: ClassVar[set[str]] = set()

    def int(self, *names: str, default: int | None = None) -> int:
        _Recording.names.add(self.find(*names)[0])
        return super().int(*names, default=default)

    def optional_int(self, *names: str) -> int | None:
        _Recording.names.add(self.find(*names)[0])
        return super().optional_int(*names)


def test_every_integer_field_the_bundled_configs_use_has_a_limit(monkeypatch):
    import servefit.core.hf_config as hf_config

    monkeypatch.setattr(hf_config, "Fields", _Recording)
    for model_id in model_ids():
        entry = find_catalog_model(model_id)
        spec_from_hf_config(entry.config, name=model_id, hf_quant_config=entry.hf_quant_config)
    unlisted = sorted(_Recording.names - set(FIELD_LIMITS))
    assert not unlisted, f"integer fields read without a row in FIELD_LIMITS: {unlisted}"


def test_the_limits_table_in_docs_lists_every_limit():
    text = DOCS.read_text()
    for name, limit in FIELD_LIMITS.items():
        row = re.search(rf"^\|[^|\n]*`{name}`[^\n]*$", text, re.MULTILINE)
        assert row, f"docs/model.md has no limits row naming `{name}`"
        assert f"{limit.minimum:,}" in row.group(0) and f"{limit.maximum:,}" in row.group(0)
