"""A ``.gguf`` file as the model argument (issue 26): its header and tensor table read with
llama.cpp's own ``gguf`` package, the weights never loaded; a tiny file is written here with
that package's writer (random weights, quantized by its own Q8_0 encoder)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

gguf = pytest.importorskip("gguf")  # in the test extra; the skip only guards a bare install

from servefit.cli.main import cli  # noqa: E402

Q8_0 = gguf.GGMLQuantizationType.Q8_0
HIDDEN, FFN, HEADS, KV_HEADS, VOCAB, LAYERS = 64, 128, 4, 2, 256, 2
Q8_0_BYTES_PER_32 = 34  # one fp16 scale + 32 int8 values


def _write(path, *, tied=False, split_at=None):
    rng = np.random.default_rng(0)

    def q8(rows, cols):
        return gguf.quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), Q8_0)

    tensors = {"token_embd.weight": (q8(VOCAB, HIDDEN), Q8_0)}
    for i in range(LAYERS):
        head = HIDDEN // HEADS
        tensors[f"blk.{i}.attn_norm.weight"] = (np.ones(HIDDEN, np.float32), None)
        tensors[f"blk.{i}.attn_q.weight"] = (q8(HIDDEN, HIDDEN), Q8_0)
        tensors[f"blk.{i}.attn_k.weight"] = (q8(KV_HEADS * head, HIDDEN), Q8_0)
        tensors[f"blk.{i}.attn_v.weight"] = (q8(KV_HEADS * head, HIDDEN), Q8_0)
        tensors[f"blk.{i}.attn_output.weight"] = (q8(HIDDEN, HIDDEN), Q8_0)
        tensors[f"blk.{i}.ffn_norm.weight"] = (np.ones(HIDDEN, np.float32), None)
        tensors[f"blk.{i}.ffn_gate.weight"] = (q8(FFN, HIDDEN), Q8_0)
        tensors[f"blk.{i}.ffn_up.weight"] = (q8(FFN, HIDDEN), Q8_0)
        tensors[f"blk.{i}.ffn_down.weight"] = (q8(HIDDEN, FFN), Q8_0)
    tensors["output_norm.weight"] = (np.ones(HIDDEN, np.float32), None)
    if not tied:
        head = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16)
        tensors["output.weight"] = (head, None)
    names = list(tensors)
    groups = [names] if split_at is None else [names[:split_at], names[split_at:]]
    paths = (
        [path]
        if split_at is None
        else [path.with_name(f"tiny-{i:05d}-of-00002.gguf") for i in (1, 2)]
    )
    for index, (out, group) in enumerate(zip(paths, groups, strict=True)):
        w = gguf.GGUFWriter(str(out), "llama")
        if index == 0:
            w.add_block_count(LAYERS)
            w.add_embedding_length(HIDDEN)
            w.add_feed_forward_length(FFN)
            w.add_head_count(HEADS)
            w.add_head_count_kv(KV_HEADS)
            w.add_context_length(4096)
            w.add_rope_freq_base(10000.0)
            w.add_layer_norm_rms_eps(1e-5)
            w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
        for name in group:
            data, qtype = tensors[name]
            w.add_tensor(name, data, raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return paths[0]


def _q8_bytes(rows, cols):
    return rows * cols // 32 * Q8_0_BYTES_PER_32


# the hand count of the file's tensor data
EMBEDDING = _q8_bytes(VOCAB, HIDDEN)  # 256 x 64 / 32 x 34 = 17,408
LAYER = (
    2 * HIDDEN * 4  # two f32 norms
    + 2 * _q8_bytes(HIDDEN, HIDDEN)  # q, o
    + 2 * _q8_bytes(KV_HEADS * HIDDEN // HEADS, HIDDEN)  # k, v
    + 3 * _q8_bytes(FFN, HIDDEN)  # gate, up, down
)
HEAD = VOCAB * HIDDEN * 2 + HIDDEN * 4  # an f16 output.weight and the f32 output norm


def _plan(path, *args):
    result = CliRunner().invoke(
        cli, ["plan", str(path), "--gpu", "RTX-4090", "--max-model-len", "4096", "--json", *args]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_header_is_the_model_and_the_table_its_exact_bytes(tmp_path):
    path = _write(tmp_path / "tiny.gguf")
    doc = _plan(path)
    assert doc["vllm_command"].startswith(f"llama-server -m {path}")  # llama.cpp's engine
    assert doc["model"]["num_layers"] == LAYERS
    assert doc["model"]["params_embedding"] == 2 * VOCAB * HIDDEN  # untied: embedding + head
    assert doc["model"]["checkpoint_bytes"] == EMBEDDING + LAYERS * LAYER + HEAD
    # every tensor but the token embedding is on the GPU (llama.cpp keeps the input layer on
    # the CPU): the file's own bytes, to the byte
    assert doc["memory"]["weights_bytes_per_gpu"] == LAYERS * LAYER + HEAD
    assert doc["memory"]["weights_bytes_total"] == EMBEDDING + LAYERS * LAYER + HEAD
    # KV: 2 layers x 2 (K, V) x 2 KV heads x 16 dims x 2 bytes (f16) = 256 bytes a token
    assert doc["memory"]["kv_bytes_per_token"] == LAYERS * 2 * KV_HEADS * 16 * 2
    assert doc["model"]["quantization"] == "gguf-q8_0"  # general.file_type MOSTLY_Q8_0


def test_a_tied_head_is_the_embedding_copied_to_the_gpu(tmp_path):
    doc = _plan(_write(tmp_path / "tiny.gguf", tied=True))
    assert doc["memory"]["weights_bytes_per_gpu"] == LAYERS * LAYER + HIDDEN * 4 + EMBEDDING


def test_a_split_file_is_read_whole_from_its_first_part(tmp_path):
    first = _write(tmp_path / "tiny.gguf", split_at=7)
    doc = _plan(first)
    assert doc["memory"]["weights_bytes_total"] == EMBEDDING + LAYERS * LAYER + HEAD
    first.with_name("tiny-00002-of-00002.gguf").unlink()
    result = CliRunner().invoke(cli, ["plan", str(first), "--gpu", "RTX-4090"])
    assert result.exit_code == 2 and "tiny-00002-of-00002.gguf" in result.output


def test_two_gpus_split_the_files_layers(tmp_path):
    doc = _plan(_write(tmp_path / "tiny.gguf"), "-pp", "2")
    # 3 layers (2 + output) over split points 0.5, 1: layer 0 (0/3) on GPU 0, layer 1 (1/3)
    # on GPU 0, the output layer (2/3) on GPU 1: GPU 0 binds with both layers
    assert doc["memory"]["weights_bytes_per_gpu"] == 2 * LAYER


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    result = CliRunner().invoke(cli, ["plan", str(bad), "--gpu", "RTX-4090"])
    assert result.exit_code == 2 and "not a readable GGUF file" in result.output


def test_a_gguf_file_takes_no_second_type_and_a_mac_no_second_gpu(tmp_path):
    path = _write(tmp_path / "tiny.gguf")
    result = CliRunner().invoke(cli, ["plan", str(path), "--gpu", "RTX-4090", "--gguf", "Q4_K_M"])
    assert result.exit_code == 2 and "is a GGUF file already" in result.output
    result = CliRunner().invoke(cli, ["plan", str(path), "--gpu", "M2-Ultra", "-pp", "2"])
    assert result.exit_code == 2 and "a Mac has one GPU" in result.output


@pytest.mark.parametrize("keep", [200, 4000])
def test_a_truncated_gguf_is_a_clear_error(tmp_path, keep):
    whole = _write(tmp_path / "tiny.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:keep])
    result = CliRunner().invoke(cli, ["plan", str(cut), "--gpu", "RTX-4090"])
    assert result.exit_code == 2 and "not a readable GGUF file" in result.output
