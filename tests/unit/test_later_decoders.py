"""Llama-shaped decoders of later releases, planned from their bundled config.json copies:
SmolLM3 (tied embeddings by its config class's default), OLMo 3 and EXAONE 4 (three sliding
layers to one global, by layer_types or EXAONE's "LLLG" pattern), Devstral 2 (Ministral 3,
FP8)."""

from __future__ import annotations

from collections import Counter

import pytest

from servefit.adapters.model_source import load_model
from servefit.core.hf_config import spec_from_hf_config
from servefit.core.weights import count_params
from servefit.errors import ConfigError


def _spec(model_id):
    return load_model(model_id, allow_hub=False).spec


def _windows(spec):
    return Counter(layer.mixer.sliding_window_tokens for layer in spec.layers)


def test_smollm3_ties_its_embeddings():
    spec = _spec("HuggingFaceTB/SmolLM3-3B")
    assert spec.tie_word_embeddings
    # 36 layers x (2,048 x (2,048 + 2 x 512 + 2,048) attention + 3 x 2,048 x 11,008 MLP)
    # + 128,256 x 2,048 once (tied) + norms: the "3B" checkpoint, 3.08 B
    layer = 2048 * (2048 + 2 * 4 * 128 + 2048) + 3 * 2048 * 11008 + 2 * 2048
    expected = 36 * layer + 128256 * 2048 + 2048
    assert count_params(spec).total == expected


@pytest.mark.parametrize(
    "model_id", ["allenai/Olmo-3.1-32B-Instruct", "LGAI-EXAONE/EXAONE-4.0-32B"]
)
def test_three_sliding_layers_to_one_global(model_id):
    spec = _spec(model_id)
    assert _windows(spec) == {4096: 48, None: 16}
    assert all(spec.layers[i].mixer.sliding_window_tokens is None for i in range(3, 64, 4))


def test_exaone4s_pattern_alone_gives_the_same_layers_and_a_contradiction_is_refused():
    entry = load_model("LGAI-EXAONE/EXAONE-4.0-32B", allow_hub=False).spec
    from servefit.adapters.catalog import find_catalog_model

    config = dict(find_catalog_model("LGAI-EXAONE/EXAONE-4.0-32B").config)
    del config["layer_types"]
    assert _windows(spec_from_hf_config(config, name="x")) == _windows(entry)
    config["layer_types"] = ["full_attention"] * 64
    with pytest.raises(ConfigError, match="disagree with sliding_window_pattern"):
        spec_from_hf_config(config, name="x")


def test_devstral_2_is_an_fp8_mistral_decoder():
    spec = _spec("mistralai/Devstral-2-123B-Instruct-2512")
    assert spec.num_layers == 88 and spec.quant.method == "fp8"
    assert 120e9 < count_params(spec).total < 130e9  # "123B"
