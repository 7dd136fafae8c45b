"""``ollama:NAME[:TAG]`` (issue 26): the GGUF blob a model Ollama pulled, found through the
store's manifest (Docker-distribution schema 2, blobs named sha256-<hex>), planned on
llama.cpp at the num_ctx its params layer sets. The store is built here as Ollama lays it
out, around a tiny GGUF written with llama.cpp's gguf package."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner

pytest.importorskip("gguf")  # in the test extra

from tests.unit.test_gguf_file import EMBEDDING, HEAD, LAYER, LAYERS, _write

from servefit.cli.main import cli


def _blob(root, data):
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _store(tmp_path, *, name=("library", "tiny", "q8"), params=None):
    root = tmp_path / "models"
    model = _write(tmp_path / "tiny.gguf").read_bytes()
    layers = [{"mediaType": "application/vnd.ollama.image.model", **_blob(root, model)}]
    if params is not None:
        blob = _blob(root, json.dumps(params).encode())
        layers.append({"mediaType": "application/vnd.ollama.image.params", **blob})
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            **_blob(root, b"{}"),
        },
        "layers": layers,
    }
    folder = root / "manifests" / "registry.ollama.ai" / name[0] / name[1]
    folder.mkdir(parents=True)
    (folder / name[2]).write_text(json.dumps(manifest))
    return root


def _plan(root, monkeypatch, model, *args):
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    result = CliRunner().invoke(cli, ["plan", model, "--gpu", "RTX-4090", "--json", *args])
    return result.exit_code, result.output


def test_a_pulled_model_plans_from_its_blob_at_its_num_ctx(tmp_path, monkeypatch):
    root = _store(tmp_path, params={"num_ctx": 8192, "stop": ["<|eot_id|>"]})
    code, out = _plan(root, monkeypatch, "ollama:tiny:q8")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["settings"]["max_model_len"] == 8192  # the params layer's num_ctx
    assert doc["memory"]["weights_bytes_total"] == EMBEDDING + LAYERS * LAYER + HEAD
    assert doc["vllm_command"].startswith(f"llama-server -m {root / 'blobs' / 'sha256-'}")
    # the command line's context wins over the model's num_ctx
    code, out = _plan(root, monkeypatch, "ollama:tiny:q8", "--max-model-len", "2048")
    assert code == 0 and json.loads(out)["settings"]["max_model_len"] == 2048


def test_without_a_num_ctx_the_context_must_be_given(tmp_path, monkeypatch):
    root = _store(tmp_path)
    code, out = _plan(root, monkeypatch, "ollama:tiny:q8")
    assert code == 2 and "--max-model-len" in out and "num_ctx" in out
    code, _ = _plan(root, monkeypatch, "ollama:tiny:q8", "--max-model-len", "4096")
    assert code == 0


def test_a_namespace_and_the_latest_tag_are_read_as_ollama_reads_them(tmp_path, monkeypatch):
    root = _store(tmp_path, name=("someone", "tiny", "latest"), params={"num_ctx": 4096})
    code, out = _plan(root, monkeypatch, "ollama:someone/tiny")
    assert code == 0, out


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("ollama:absent:7b", "ollama pull"),
        ("ollama:../../etc/passwd", "not an Ollama model name"),
    ],
)
def test_a_model_not_in_the_store_is_named(tmp_path, monkeypatch, model, words):
    root = _store(tmp_path, params={"num_ctx": 4096})
    code, out = _plan(root, monkeypatch, model)
    assert code == 2 and words in out


def test_fit_ranks_the_pulled_models_beside_the_catalog(tmp_path, monkeypatch):
    root = _store(tmp_path)  # no params: fit plans it at the task's context all the same
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    result = CliRunner().invoke(
        cli, ["fit", "--gpu", "RTX-4090", "--ollama", "--search", "ollama:tiny", "--json"]
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["rows"]
    assert row["model"] == "ollama:tiny:q8" and row["engine"] == "llama.cpp" and row["fits"]
    assert row["weights_bytes_per_gpu"] == LAYERS * LAYER + HEAD  # the file's own bytes
    # the tiny model's own context (4,096) caps the chat task's 8,192
    assert row["context_tokens"] == 4096
    empty = tmp_path / "empty"
    monkeypatch.setenv("OLLAMA_MODELS", str(empty))
    result = CliRunner().invoke(cli, ["fit", "--gpu", "RTX-4090", "--ollama"])
    assert result.exit_code == 2 and "no model in the Ollama store" in result.output
