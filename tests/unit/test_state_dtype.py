"""The recurrent state's dtype, as vLLM's per-architecture hooks pick it when
``--mamba-ssm-cache-dtype`` is auto (vllm/model_executor/models/config.py, v0.32.0):
Nemotron-H takes its config's ``mamba_ssm_cache_dtype``, else float32; Qwen3.5/3.6 take
``mamba_ssm_dtype``; every other architecture keeps the state in the model dtype."""

from __future__ import annotations

import pytest

from servefit.adapters.catalog import find_catalog_model
from servefit.core.hf_config import state_dtype
from servefit.core.kv_cache import state_bytes
from servefit.core.model_spec import MambaSpec

NEMOTRON_NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"


@pytest.mark.parametrize(
    ("architecture", "fields", "expected"),
    [
        ("NemotronHForCausalLM", {}, "float32"),  # the v0.32 default (vllm#39032)
        ("NemotronHForCausalLM", {"mamba_ssm_cache_dtype": "bfloat16"}, "bfloat16"),
        ("NemotronHPuzzleForCausalLM", {}, "float32"),
        ("Qwen3_5ForConditionalGeneration", {"mamba_ssm_dtype": "float32"}, "float32"),
        ("Qwen3_5ForConditionalGeneration", {}, None),
        ("Qwen3_5MoeForCausalLM", {"mamba_ssm_dtype": "float32"}, "float32"),
        # no hook: vLLM ignores these fields and keeps the model dtype
        ("Qwen3NextForCausalLM", {"mamba_ssm_dtype": "float32"}, None),
        ("JambaForCausalLM", {"mamba_ssm_cache_dtype": "float32"}, None),
        ("LlamaForCausalLM", {}, None),
    ],
)
def test_state_dtype_follows_each_architectures_hook(architecture, fields, expected):
    assert state_dtype({"architectures": [architecture], **fields}) == expected


def test_nemotron_h_multimodal_reads_its_text_config():
    config = {
        "architectures": ["NemotronH_Nano_VL_V2"],
        "text_config": {"mamba_ssm_cache_dtype": "float16"},
    }
    assert state_dtype(config) == "float16"


def test_nemotron_nano_state_page_by_hand(catalog_model):
    """Nemotron-3-Nano-30B-A3B's config (64 Mamba heads x head_dim 64, d_state 128,
    8 groups, conv kernel 4, bf16 weights) by hand, per Mamba-2 layer on one GPU:
    conv window = (4 - 1) x (64 x 64 + 2 x 8 x 128) x 2 B = 3 x 6,144 x 2 = 36,864 B;
    SSM state  = 64 x 64 x 128 elements x 4 B (float32) = 2,097,152 B -> 2,134,016 B.
    In the model dtype (what servefit planned before) the SSM half is 1,048,576 B."""
    loaded = catalog_model(NEMOTRON_NANO)
    assert loaded.mamba_ssm_dtype == "float32"
    assert find_catalog_model(NEMOTRON_NANO).config.get("mamba_ssm_cache_dtype") is None
    mamba = next(layer.mixer for layer in loaded.spec.layers if isinstance(layer.mixer, MambaSpec))
    assert state_bytes(mamba, 1, 2, 4) == 36_864 + 2_097_152
    assert state_bytes(mamba, 1, 2, 2) == 36_864 + 1_048_576


def test_the_users_flag_wins_and_is_printed(catalog_model):
    """``--mamba-ssm-cache-dtype float16`` halves Nemotron's SSM state against its float32
    default: more requests fit, and the printed command carries the flag."""
    from servefit.adapters.catalog import find_gpu
    from servefit.core.engines import get_engine
    from servefit.core.plan import ServeSettings

    loaded = catalog_model(NEMOTRON_NANO)
    gpu = find_gpu("H100")
    engine = get_engine("vllm")

    def plan(flag: str):
        s = ServeSettings(max_model_len=32768, mamba_ssm_cache_dtype=flag)
        return engine.plan(loaded.spec, gpu, s, mamba_ssm_dtype=loaded.mamba_ssm_dtype), s

    auto, _ = plan("auto")
    half, asked = plan("float16")
    explicit32, _ = plan("float32")
    assert explicit32.num_blocks == auto.num_blocks  # auto is float32 for Nemotron-H
    assert half.max_concurrency > auto.max_concurrency
    args = engine.launch_args(NEMOTRON_NANO, half, asked)
    assert args[args.index("--mamba-ssm-cache-dtype") + 1] == "float16"
    assert "--mamba-ssm-cache-dtype" not in engine.launch_args(NEMOTRON_NANO, auto, ServeSettings())


def test_an_unknown_flag_value_is_refused():
    from servefit.core.plan import ServeSettings
    from servefit.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="--mamba-ssm-cache-dtype 'fp8'"):
        ServeSettings(mamba_ssm_cache_dtype="fp8")
