"""Falcon-H1: attention and Mamba-2 side by side in every layer, held to vLLM 0.32 by hand.

vLLM's ``model_executor/models/falcon_h1.py``: each ``FalconH1ParallelHybrid`` layer holds a
``FalconH1AttentionDecoderLayer`` (q/k/v/o, no biases, RoPE over ``attn_rotary_emb`` or the
whole head), a ``MambaMixer2`` (width ``mamba_d_ssm``, else ``mamba_expand x hidden``; its
gated norm has a weight only with ``mamba_rms_norm``), a gated MLP and two RMSNorms. The
attention and the Mamba register as two cache layers (the Mamba under index
``num_hidden_layers + i``). The golden engine numbers were observed with vLLM 0.32.0's CPU
build on ``make_tiny_model.py --arch falcon_h1`` (1 GiB of KV space, bf16 state).
"""

from __future__ import annotations

import math

import pytest

from servefit.core.engines.vllm_cpu import VllmCpuEngine, cpu_device
from servefit.core.hf_config import spec_from_hf_config, state_dtype
from servefit.core.kv_cache import state_bytes
from servefit.core.model_spec import AttentionSpec, MambaSpec, MixerKind
from servefit.core.plan import ServeSettings, check_parallel_layout
from servefit.core.weights import count_params
from servefit.errors import ConfigError, InvalidArgumentError
from servefit.units import GIB_BYTES

# make_tiny_model.py --arch falcon_h1, as transformers 5.19 writes it (shape fields)
TINY = {
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "torch_dtype": "bfloat16",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "mamba_d_ssm": 256,
    "mamba_n_heads": 4,
    "mamba_d_head": 64,
    "mamba_d_state": 64,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
    "mamba_rms_norm": False,
    "attention_bias": False,
    "mlp_bias": False,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "vocab_size": 1024,
}


def test_every_layer_has_attention_and_mamba():
    s = spec_from_hf_config(TINY)
    assert s.num_layers == 2 and s.is_hybrid
    layer = s.layers[0]
    assert isinstance(layer.mixer, AttentionSpec) and isinstance(layer.parallel_mixer, MambaSpec)
    assert s.layers_of_kind(MixerKind.FULL_ATTENTION) == s.layers_of_kind(MixerKind.MAMBA) == 2
    m = layer.parallel_mixer
    assert (m.d_inner, m.num_heads, m.head_dim, m.state_size, m.has_norm) == (256, 4, 64, 64, False)
    assert s.rope_cache_dims == (32,)  # the whole head rotates without attn_rotary_emb
    assert state_dtype(TINY) is None  # no hook: the model dtype


def test_parameters_by_hand():
    h, v = 128, 1024
    attention = h * 4 * 32 + 2 * h * 2 * 32 + 4 * 32 * h  # q, k, v, o; no biases
    conv_dim = 256 + 2 * 1 * 64
    mamba = h * (2 * 256 + 2 * 64 + 4) + conv_dim * 4 + conv_dim + 3 * 4 + 256 * h  # no norm
    mlp = 3 * h * 256  # gate_up + down
    per_layer = attention + mamba + mlp + 2 * h
    total = 2 * v * h + 2 * per_layer + h  # untied embedding and head, final norm
    assert total == 791_960  # transformers' own count of the tiny checkpoint
    assert count_params(spec_from_hf_config(TINY)).total == total
    with_norm = spec_from_hf_config({**TINY, "mamba_rms_norm": True})
    assert count_params(with_norm).total == total + 2 * 256  # the gated norm's weight


def test_mamba_width_defaults_as_transformers():
    absent = {k: v for k, v in TINY.items() if k not in ("mamba_d_ssm", "mamba_d_head")}
    absent["mamba_n_heads"] = 16
    # FalconH1Config: mamba_d_ssm 1,024 when absent; mamba_d_head "auto" = width / heads
    m = spec_from_hf_config(absent).layers[0].parallel_mixer
    assert (m.d_inner, m.head_dim) == (1024, 64)
    m = spec_from_hf_config({**absent, "mamba_d_ssm": None}).layers[0].parallel_mixer
    assert m.d_inner == 2 * 128  # null: mamba_expand x hidden_size


def test_inconsistent_widths_and_activation_are_config_errors():
    with pytest.raises(ConfigError, match="mamba_n_heads 4 x mamba_d_head 32"):
        spec_from_hf_config({**TINY, "mamba_d_head": 32})
    with pytest.raises(ConfigError, match="hidden_act 'gelu'"):
        spec_from_hf_config({**TINY, "hidden_act": "gelu"})


def test_state_page_and_block_raise_by_hand():
    m = spec_from_hf_config(TINY).layers[0].parallel_mixer
    state = (3 * (256 + 2 * 64) + 4 * 64 * 64) * 2
    assert state_bytes(m, 1, 2, 2) == state == 35_072
    per_token = 2 * (32 + 32) * 2  # 2 KV heads, K and V, bf16
    assert 128 * math.ceil(state / (128 * per_token)) == 256  # the CPU's 128 raised


@pytest.mark.parametrize(
    ("prefix_caching", "tokens", "concurrency"),
    [
        # "CPU KV cache size: 1,766,022 tokens, ... 431.16x": 16 + 3 blocks a request
        (True, 1_766_022, 431.16),
        # "CPU KV cache size: 1,973,790 tokens, ... 481.88x": 16 + 1
        (False, 1_973_790, 481.88),
    ],
)
def test_tiny_falcon_h1_plans_as_the_cpu_engine_logged(prefix_caching, tokens, concurrency):
    host = cpu_device(name="CPU", memory_bytes=8 * GIB_BYTES, isa_flags=("avx2",))
    settings = ServeSettings(
        max_model_len=4096,
        kv_cache_memory_bytes=GIB_BYTES,
        enable_prefix_caching=prefix_caching,
        vllm_version="0.32",
    )
    plan = VllmCpuEngine().plan(spec_from_hf_config(TINY), host, settings)
    assert plan.settings.block_size == 256
    assert (plan.layout.group_size, len(plan.layout.groups)) == (2, 2)  # 2 attn + 2 Mamba
    assert plan.num_blocks == GIB_BYTES // (256 * 256) // 2 == 8192
    need = 4096 // 256 + (3 if prefix_caching else 1)
    assert plan.max_concurrency == pytest.approx(8192 / need)
    assert f"{plan.max_concurrency:.2f}" == f"{concurrency:.2f}"
    assert plan.kv_cache_tokens == tokens


def test_tp_refuses_on_either_mixer():
    s = spec_from_hf_config(TINY)
    check_parallel_layout(s, 2, 1)
    with pytest.raises(InvalidArgumentError, match="4 Mamba heads do not divide by 8"):
        check_parallel_layout(s, 8, 1)
    wide = spec_from_hf_config({**TINY, "num_attention_heads": 8, "head_dim": 16})
    with pytest.raises(InvalidArgumentError, match="Mamba heads do not divide by 8"):
        check_parallel_layout(wide, 8, 1)  # attention splits 8 ways, the Mamba does not
