"""The plan's model section: the catalog entry's confidence (terminal and JSON) and the
two conventions of "active parameters"."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from servefit.adapters.model_source import load_model
from servefit.adapters.plan_document import ModelSection
from servefit.cli.render import catalog_caveat
from servefit.core.weights import count_params

CLI = [sys.executable, "-m", "servefit.cli.main"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "400"}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=ENV, timeout=60)


# --- catalog confidence ----------------------------------------------------------------------


def test_reconstructed_entry_carries_its_confidence_and_note(catalog_model):
    loaded = catalog_model("Qwen/Qwen3.6-27B-FP8")
    assert loaded.catalog_confidence == "medium"
    assert loaded.catalog_note.startswith("RECONSTRUCTED: the Hugging Face file")
    assert catalog_caveat(loaded) == (
        "catalog entry: medium confidence, reconstructed (the Hugging Face file was not "
        "retrievable offline); give a path to the model's own config.json to plan on the "
        "real file"
    )


def test_confidence_levels_are_normalised_and_high_says_nothing(catalog_model):
    assert catalog_model("Qwen/Qwen3-30B-A3B-FP8").catalog_confidence == "high"  # "high."
    assert catalog_model("google/gemma-3-27b-it").catalog_confidence == "medium"  # "medium."
    assert catalog_caveat(catalog_model("meta-llama/Llama-3.1-8B")) is None
    low = catalog_caveat(catalog_model("deepseek-ai/DeepSeek-V2-Lite"))
    assert low.startswith("catalog entry: low-medium confidence (mlc trimmed keys)")
    # the note's restated level is dropped; a bare "medium" note adds nothing
    assert catalog_caveat(catalog_model("microsoft/Phi-4-mini-instruct")).startswith(
        "catalog entry: medium confidence; "
    )
    # reconstructed per its source, not its note
    assert "reconstructed" in catalog_caveat(catalog_model("google/gemma-3-27b-it"))


def test_a_config_from_a_path_has_no_catalog_confidence(tmp_path, catalog_model):
    from servefit.adapters.catalog import find_catalog_model

    entry = find_catalog_model("meta-llama/Llama-3.1-8B")
    (tmp_path / "config.json").write_text(json.dumps(entry.config), encoding="utf-8")
    loaded = load_model(str(tmp_path), allow_hub=False)
    assert loaded.catalog_confidence is None and loaded.catalog_note is None
    assert catalog_caveat(loaded) is None


def test_terminal_and_json_say_so():
    text = run("plan", "Qwen/Qwen3.6-27B-FP8", "--gpu", "A100-80GB")
    assert "catalog entry: medium confidence, reconstructed" in text.stdout, text.stderr
    doc = json.loads(run("plan", "Qwen/Qwen3.6-27B-FP8", "--gpu", "A100-80GB", "--json").stdout)
    assert doc["model"]["catalog_confidence"] == "medium"
    assert doc["model"]["catalog_note"].startswith("RECONSTRUCTED")
    high = run("plan", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--max-model-len", "8192")
    assert "catalog entry" not in high.stdout


def test_documents_without_the_new_keys_still_load():
    section = ModelSection(
        id="m",
        source="s",
        architecture="a",
        model_type="t",
        family="dense",
        dtype="bfloat16",
        quantization="unquantized",
        num_layers=1,
        layer_kinds={"full_attention": 1},
        params_total=1,
        params_active=1,
        params_embedding=0,
        params_vision=0,
        params_mtp=0,
        checkpoint_bytes=None,
    )
    old = {
        k: v
        for k, v in section.model_dump().items()
        if k not in ("params_active_non_embedding", "catalog_confidence", "catalog_note")
    }
    back = ModelSection.model_validate(old)
    assert back.catalog_confidence is None and back.params_active_non_embedding is None


# --- active parameters: two conventions -----------------------------------------------------


def test_openai_counts_active_without_the_input_embedding(catalog_model):
    """gpt-oss model card: "116.8B total parameters (5.1B active)", the input embedding
    (201,088 x 2,880 = 0.58B) left out; servefit's params_active keeps it (5.7B)."""
    counts = count_params(catalog_model("openai/gpt-oss-120b").spec)
    assert counts.active_non_embedding == counts.active - 201_088 * 2_880
    assert abs(counts.active_non_embedding - 5.1e9) <= 0.05e9
    assert counts.active > 5.6e9


def test_mistral_counts_active_with_it(catalog_model):
    """Mixtral announcement: "12.9B parameters per token", the input embedding included."""
    counts = count_params(catalog_model("mistralai/Mixtral-8x7B-v0.1").spec)
    assert abs(counts.active - 12.9e9) <= 0.05e9
    assert counts.active - counts.active_non_embedding == 32_000 * 4_096


@pytest.mark.parametrize("model_id", ["Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-1.5B"])
def test_a_tied_embedding_stays_in_both(catalog_model, model_id):
    """A tied matrix is also the LM head's matmul, which every token uses."""
    counts = count_params(catalog_model(model_id).spec)
    assert counts.active_non_embedding == counts.active


def test_json_has_both_counts():
    doc = json.loads(run("plan", "openai/gpt-oss-20b", "--gpu", "H100", "--json").stdout)
    model = doc["model"]
    assert model["params_active"] - model["params_active_non_embedding"] == 201_088 * 2_880
