"""Bytes of quantized linears, hand-derived, and which modules stay unquantized."""

import pytest

from servefit.core.quant import (
    QuantSpec,
    fp8_block,
    int_grouped,
    module_matches,
    mxfp4,
    nvfp4,
    quant_from_hf,
)
from servefit.errors import ConfigError


def test_fp8_block_bytes_hand_derived():
    # 256 x 384 weight: 1 byte each, plus fp32 scales for
    # ceil(256/128) x ceil(384/128) = 2 x 3 blocks
    assert fp8_block(128, 128).linear_bytes(in_features=384, out_features=256) == 256 * 384 + 6 * 4


def test_awq_int4_group128_bytes_hand_derived():
    fmt = int_grouped(4, 128, has_zero_point=True)
    # 4096 x 4096 at 4 bits = 8 MiB; 32 groups per row x 4096 rows of fp16 scales and 4-bit zeros
    expected = 4096 * 4096 / 2 + 32 * 4096 * 2 + 32 * 4096 * 0.5
    assert fmt.linear_bytes(4096, 4096) == expected


def test_gptq_adds_g_idx():
    with_idx = int_grouped(4, 128, has_zero_point=True, has_g_idx=True)
    without = int_grouped(4, 128, has_zero_point=True)
    assert with_idx.linear_bytes(4096, 1024) - without.linear_bytes(4096, 1024) == 4096 * 4


def test_mxfp4_and_nvfp4_scale_overheads():
    # MXFP4: 4 bits + one byte per 32 elements = 4.25 bits per weight
    assert mxfp4().linear_bytes(2880, 5760) == pytest.approx(2880 * 5760 * 4.25 / 8)
    # NVFP4: 4 bits + one fp8 scale per 16 = 4.5 bits, plus two fp32 global scales
    assert nvfp4().linear_bytes(5120, 17408) == pytest.approx(5120 * 17408 * 4.5 / 8 + 8)


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("lm_head", "lm_head", True),
        ("model.layers.1.mlp", "model.layers.1.mlp.gate_proj", True),
        ("model.layers.1.mlp", "model.layers.10.mlp.gate_proj", False),
        ("model.layers.*.self_attn", "model.layers.7.self_attn.q_proj", True),
        ("model.layers.*.mlp.router", "model.layers.7.mlp.experts.0.up_proj", False),
        ("re:.*linear_attn.*", "model.language_model.layers.0.linear_attn.in_proj_qkv", True),
        ("re:^mtp.*", "model.layers.0.mlp.up_proj", False),
        ("mtp*", "mtp.layers.0.self_attn.q_proj", True),
    ],
)
def test_module_matching_follows_the_three_spellings(pattern, name, expected):
    assert module_matches(pattern, name) is expected


def test_fp8_ignore_list_keeps_modules_in_model_dtype():
    q = quant_from_hf(
        {
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "modules_to_not_convert": ["lm_head", "model.layers.0.mlp.gate"],
        }
    )
    assert q.format_for("model.layers.0.mlp.gate") is None
    assert q.format_for("model.layers.0.mlp.gate_proj") is not None  # gate != gate_proj
    assert q.format_for("model.layers.3.self_attn.q_proj").name == "fp8-block128x128"


def test_compressed_tensors_targets_and_ignore():
    qc = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "int",
                    "strategy": "group",
                    "group_size": 128,
                    "symmetric": True,
                },
            }
        },
        "ignore": ["lm_head", "re:.*linear_attn.*"],
    }
    q = quant_from_hf(qc)
    assert q.format_for("model.layers.0.linear_attn.out_proj") is None
    fmt = q.format_for("model.layers.3.mlp.down_proj")
    assert fmt is not None and fmt.bits == 4 and fmt.group_size == 128 and fmt.zero_bits == 0


def test_modelopt_mixed_precision_is_targets_only():
    q = quant_from_hf(
        None,
        {
            "quantization": {
                "quant_algo": "MIXED_PRECISION",
                "kv_cache_quant_algo": "FP8",
                "quantized_layers": {
                    "model.layers.0.mlp.up_proj": {"quant_algo": "W4A16_NVFP4", "group_size": 16},
                    "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
                },
            }
        },
    )
    assert q.format_for("model.layers.0.mlp.up_proj").name == "nvfp4-w4a16"
    assert q.format_for("model.layers.0.self_attn.q_proj").name == "fp8"
    assert q.format_for("model.layers.0.self_attn.k_proj") is None  # not listed: unquantized
    assert q.kv_cache_dtype_hint == "fp8"


def test_unknown_method_is_a_clear_error():
    with pytest.raises(ConfigError, match="quant_method 'hqq' is not supported"):
        quant_from_hf({"quant_method": "hqq"})


def test_no_quantization_config_means_unquantized():
    assert quant_from_hf(None) == QuantSpec()
