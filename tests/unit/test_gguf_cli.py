"""``--gguf TYPE``: a checkpoint planned as the GGUF file llama.cpp's quantizer writes (issue
26). Bits per weight come from llama-quantize's own size table (tools/quantize/quantize.cpp,
sizes at Llama-3-8B)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.core.quant import gguf


def test_bits_per_weight_come_from_llama_quantizes_table():
    # "Q8_0 ... 7.96G ... @ Llama-3-8B": 7.96 GiB x 8 bits / 8,030,261,248 weights = 8.515
    assert gguf("Q8_0").bits == pytest.approx(7.96 * 2**30 * 8 / 8_030_261_248, abs=1e-3)
    assert gguf("q4_k").bits == gguf("Q4_K_M").bits  # llama-quantize's alias
    assert gguf("F16").bits == 16


def _plan(*args):
    result = CliRunner().invoke(
        cli,
        [
            "plan",
            "meta-llama/Llama-3.1-8B",
            "--offline",
            "--json",
            "--max-model-len",
            "8192",
            *args,
        ],
    )
    return result.exit_code, result.output


def test_a_gguf_plan_runs_on_llama_cpp_with_its_file():
    code, out = _plan("--gguf", "Q6_K", "--gpu", "RTX-4090")
    doc = json.loads(out)
    assert code == 0
    assert doc["vllm_command"].startswith("llama-server -m Llama-3.1-8B-Q6_K.gguf")
    # 8.03 B weights at Q6_K's 6.14 GiB / 8.03 B = 6.568 bits: about 6.1 GiB in the file, of
    # which the token embedding (128,256 x 4,096 x 6.568 / 8 bytes = 0.40 GiB) stays in host
    # memory (llama.cpp keeps the input layer on the CPU): about 5.74 GiB on the card
    bits = 6.14 * 2**30 * 8 / 8_030_261_248
    embedding_gib = 128_256 * 4_096 * bits / 8 / 2**30
    weights_gib = doc["memory"]["weights_bytes_per_gpu"] / 2**30
    assert weights_gib == pytest.approx(6.14 - embedding_gib, abs=0.06)
    assert any(f"host memory ({embedding_gib:.2f} GiB)" in a for a in doc["assumptions"])


def test_an_unknown_gguf_type_names_the_flag_and_the_known_types():
    code, out = _plan("--gguf", "Q9", "--gpu", "RTX-4090")
    assert code == 2
    assert "--gguf Q9" in out and "Q4_K_M" in out


def test_models_search_finds_the_bundled_checkpoints_by_words():
    out = CliRunner().invoke(cli, ["models", "--search", "qwen3 30b fp8"])
    assert out.exit_code == 0 and out.output.split() == ["Qwen/Qwen3-30B-A3B-FP8"]
    none = CliRunner().invoke(cli, ["models", "--search", "no-such-model"])
    assert none.exit_code == 1 and "no bundled model matches" in none.output
    detailed = CliRunner().invoke(cli, ["models", "--search", "Llama-3.1-70B", "--details"])
    assert all(line.count("\t") == 2 for line in detailed.output.splitlines())


def test_the_catalog_holds_the_checkpoints_people_serve():
    ids = CliRunner().invoke(cli, ["models"]).output.split()
    assert len(ids) >= 200
    for wanted in ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", "Qwen/QwQ-32B"):
        assert wanted in ids, wanted
