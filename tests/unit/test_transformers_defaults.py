"""A config.json that leaves shape fields out is read as transformers reads it (issue 33): the
model type's config-class defaults fill them (``core/hf_defaults.py``, transformers 5.19).

``data/llava-1.5-7b-hf.config.json`` is llava-hf/llava-1.5-7b-hf's config.json as
transformers 4.41.1 logged it when loading it from the Hub cache (snapshot 05ae2434cbb4,
public issue log): its ``text_config`` names only the model type, vocabulary, context and
norm epsilon, and relies on LlamaConfig for the rest. servefit refused it with "missing
required field 'num_hidden_layers'".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.unit.test_cli import OFFLINE

from servefit.adapters.model_source import load_model
from servefit.core.hf_config import spec_from_hf_config
from servefit.errors import ConfigError

LLAVA = Path(__file__).parent / "data" / "llava-1.5-7b-hf.config.json"


def test_llava_1_5_plans_with_llamas_defaults():
    spec = load_model(str(LLAVA), allow_hub=False).spec
    # LlamaConfig: 32 layers of hidden 4096, 32 heads (KV heads = heads), MLP 11008; the
    # file's own vocabulary (32,064) and context (4,096) win over the defaults
    assert (spec.num_layers, spec.hidden_size, spec.vocab_size) == (32, 4096, 32_064)
    assert spec.max_position_embeddings == 4096
    attention, mlp = spec.layers[0].mixer, spec.layers[0].mlp
    assert (attention.num_q_heads, attention.num_kv_heads, attention.head_dim) == (32, 32, 128)
    assert mlp.intermediate_size == 11_008
    assert spec.vision is not None  # the CLIP tower is still counted


def test_the_command_plans_the_real_file():
    done = subprocess.run(
        [sys.executable, "-m", "servefit.cli.main", "plan", str(LLAVA), "--gpu", "A40",
         "--no-performance", "--json"],
        capture_output=True, text=True, env=OFFLINE, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["fits"] is True


def test_a_field_the_file_gives_wins_over_the_default():
    config = json.loads(LLAVA.read_text())
    config["text_config"]["num_hidden_layers"] = 40  # a 13B's depth
    assert spec_from_hf_config(config, name="x").num_layers == 40


def test_a_family_without_defaults_still_names_the_missing_field():
    config = {"model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"], "vocab_size": 100}
    with pytest.raises(ConfigError, match="missing required field"):
        spec_from_hf_config(config, name="x")
