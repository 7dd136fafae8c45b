"""llama.cpp over several GPUs: its layer split (``--split-mode layer``), ``--tensor-split``
shares, what stays in host memory, and each GPU's KV cells (issue 26 / 32).

The rules are llama.cpp's ``llama_model::load_tensors`` (src/llama-model.cpp): split points
are the summed, normalised shares; offloaded layer ``il`` goes to the first device whose
point exceeds ``(il - i_gpu_start) / act`` with ``act = min(ngl, n_layer + 1)`` (the output
layer counts as layer ``n_layer``); the input embedding stays on the CPU.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servefit.adapters.catalog import find_gpu
from servefit.adapters.model_source import load_model
from servefit.app.resolve import as_gguf
from servefit.cli.main import cli
from servefit.core.engines.llama_cpp import LlamaCppEngine
from servefit.core.engines.llama_cpp_split import HOST, device_weights, placement
from servefit.core.plan import ServeSettings
from servefit.core.weight_inventory import Role
from servefit.core.weight_layers import weight_tensors
from servefit.core.weights import tensor_bytes
from servefit.errors import InvalidArgumentError

GIB = 2**30


def test_two_equal_gpus_split_65_layers_at_one_half():
    # 64 decoder layers + the output layer = 65; layer 32 sits at 32/65 = 0.492 < 0.5 (GPU 0),
    # layer 33 at 33/65 = 0.508 (GPU 1), the output layer at 64/65 (GPU 1)
    where = placement(64, 2)
    assert where.device_layers(0) == range(0, 33)
    assert where.device_layers(1) == range(33, 64)
    assert where.output_device == 1
    assert where.host_layers == range(0)


def test_tensor_split_shares_move_the_split_point():
    # -ts 3,1: points 0.75 and 1; il / 65 < 0.75 holds up to il = 48 (48/65 = 0.738)
    where = placement(64, 2, tensor_split=(3, 1))
    assert where.device_layers(0) == range(0, 49)
    assert where.device_layers(1) == range(49, 64)
    # a zero share holds nothing: -ts 0,1 puts everything on the second GPU
    empty = placement(64, 2, tensor_split=(0, 1))
    assert empty.device_layers(0) == range(0) and empty.device_layers(1) == range(0, 64)
    # four equal GPUs over 33 layers (32 + output): 8.25 layers each, boundaries at
    # il/33 >= 0.25 -> il = 9 (9/33 = 0.27; 8/33 = 0.24), 0.5 -> 17, 0.75 -> 25
    four = placement(32, 4)
    assert [four.device_layers(d) for d in range(4)] == [
        range(0, 9),
        range(9, 17),
        range(17, 25),
        range(25, 32),
    ]
    assert four.output_device == 3


def test_n_gpu_layers_leaves_the_first_layers_in_host_memory():
    # -ngl 10 of 32 layers: i_gpu_start = 32 + 1 - 10 = 23; layers 0-22 stay on the CPU,
    # 23-31 and the output layer (10 in all) go to the GPU
    where = placement(32, 1, n_gpu_layers=10)
    assert where.host_layers == range(0, 23)
    assert where.device_layers(0) == range(23, 32)
    assert where.output_device == 0
    # -ngl equal to the layer count: the output layer is one of them, so layer 0 stays behind
    assert placement(32, 1, n_gpu_layers=32).host_layers == range(0, 1)
    nothing = placement(32, 1, n_gpu_layers=0)
    assert nothing.host_layers == range(0, 32) and nothing.output_device == HOST


def test_bad_splits_name_the_flag():
    with pytest.raises(InvalidArgumentError, match="--tensor-split has 3 values for 2 GPUs"):
        placement(32, 2, tensor_split=(1, 1, 1))
    with pytest.raises(InvalidArgumentError, match=">= 0"):
        placement(32, 2, tensor_split=(-1, 2))


def _gguf(model_id, kind):
    return as_gguf(load_model(model_id, allow_hub=False), kind).spec


def test_every_tensor_is_somewhere_and_the_embedding_stays_on_the_host():
    spec = _gguf("Qwen/Qwen2.5-32B", "Q4_K_M")
    tensors = [t for t in weight_tensors(spec) if t.role not in (Role.MTP, Role.VISION)]
    file_bytes = sum(tensor_bytes(spec, t) for t in tensors)
    embedding = sum(tensor_bytes(spec, t) for t in tensors if t.role is Role.EMBEDDING)
    on = device_weights(spec, placement(spec.num_layers, 2))
    assert on.host_bytes == pytest.approx(embedding)
    assert sum(on.device_bytes) + on.host_bytes == pytest.approx(file_bytes)
    # GPU 1 has two layers fewer than GPU 0 but the LM head (152,064 x 5,120 weights)
    layer = (file_bytes - embedding - _head(spec)) / 64
    assert on.device_bytes[0] == pytest.approx(33 * layer, rel=1e-6)
    assert on.device_bytes[1] == pytest.approx(31 * layer + _head(spec), rel=1e-6)


def _head(spec):
    return sum(
        tensor_bytes(spec, t)
        for t in weight_tensors(spec)
        if t.layer_index is None and t.role not in (Role.EMBEDDING, Role.MTP, Role.VISION)
    )


def test_a_tied_lm_head_is_a_copy_of_the_embedding_on_the_output_gpu():
    spec = _gguf("meta-llama/Llama-3.2-1B", "Q8_0")
    assert spec.tie_word_embeddings
    embedding = sum(tensor_bytes(spec, t) for t in weight_tensors(spec) if t.role is Role.EMBEDDING)
    one = device_weights(spec, placement(spec.num_layers, 1))
    layers = sum(tensor_bytes(spec, t) for t in weight_tensors(spec) if t.layer_index is not None)
    assert one.host_bytes == pytest.approx(embedding)
    # the GPU: every layer, the final norm (hidden floats) and the duplicated embedding
    norm = one.device_bytes[0] - layers - embedding
    assert 0 <= norm <= spec.hidden_size * 4


def _plan(spec, **settings):
    return LlamaCppEngine().plan(spec, find_gpu("RTX-3090"), ServeSettings(**settings))


def test_each_gpu_reserves_the_kv_cells_of_its_own_layers():
    spec = _gguf("Qwen/Qwen2.5-32B", "Q4_K_M")
    one = _plan(spec, max_model_len=32_768)
    two = _plan(spec, max_model_len=32_768, pipeline_parallel_size=2)
    # one RTX 3090: 64 layers x 32,768 cells x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 8 GiB
    assert not one.starts
    assert one.reserved_kv_cache_bytes == 64 * 32_768 * 8 * 128 * 2 * 2
    # two: GPU 0 (33 layers, 9.2 GiB of weights) binds before GPU 1 (31 layers + the head)
    assert two.starts and two.settings.num_gpus == 2
    assert two.reserved_kv_cache_bytes == 33 * 32_768 * 8 * 128 * 2 * 2
    assert two.memory.weights_bytes < one.memory.weights_bytes / 2 + GIB


def _cli(*args):
    result = CliRunner().invoke(
        cli,
        [
            "plan",
            "Qwen/Qwen2.5-32B",
            "--gguf",
            "Q4_K_M",
            "--gpu",
            "RTX-3090",
            "--max-model-len",
            "32768",
            "--offline",
            "--json",
            *args,
        ],
    )
    return result.exit_code, result.output


def test_the_command_names_the_gpus_and_the_shares():
    code, out = _cli("-pp", "2", "--tensor-split", "3,1")
    assert code == 0
    assert json.loads(out)["vllm_command"].endswith("-ngl 99 -dev CUDA0,CUDA1 -ts 3,1")


def test_one_gpu_is_told_to_shorten_the_context_or_add_a_gpu():
    code, out = _cli()
    doc = json.loads(out)
    assert code == 1
    assert "the 32,768 KV cells -c reserves at start" in doc["verdict"]["margin"]["constraint"]
    # llama.cpp's slot is exact: the recommendation shortens it rather than offering TP
    assert doc["recommendation"]["changes"][0]["flag"] == "--max-model-len"


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("-tp", "2"), "--pipeline-parallel-size 2"),
        (("-pp", "2", "--tensor-split", "1,1,1"), "--tensor-split has 3 values"),
        (("-pp", "2", "--tensor-split", "1,x"), "one number a GPU"),
    ],
)
def test_llama_cpp_multi_gpu_input_errors_exit_2(args, names):
    code, out = _cli(*args)
    assert code == 2 and names in out


def test_vllm_refuses_the_llama_cpp_split():
    result = CliRunner().invoke(
        cli,
        ["plan", "Qwen/Qwen2.5-32B", "--gpu", "H100", "-ts", "1,1", "-tp", "2", "--offline"],
    )
    assert result.exit_code == 2 and "--tensor-split is llama.cpp's" in result.output


def test_n_gpu_layers_keeps_the_first_layers_and_their_cells_in_host_memory():
    code, out = _cli("--n-gpu-layers", "40")
    doc = json.loads(out)
    assert code == 0 and doc["fits"]
    # -ngl 40 of 64 + 1: layers 25-63 and the output layer on the GPU, 0-24 on the host; the
    # GPU reserves the cells of its 39 layers: 39 x 32,768 x 8 x 128 x 2 x 2 bytes
    held = 39 * 32_768 * 8 * 128 * 2 * 2
    spare = doc["memory"]["kv_cache_memory_bytes"] - held
    assert doc["verdict"]["margin"]["spare_kv_cache_bytes"] == pytest.approx(spare, rel=1e-3)
    assert any("layers 0-24 (25 of 64)" in a for a in doc["assumptions"])
    assert doc["vllm_command"].endswith("-ngl 40")
    # the CPU's share of a step is not timed: no speed rather than a wrong one
    assert doc["performance"] is None and "host memory" in doc["performance_note"]


def test_n_gpu_layers_is_llama_cpps_alone():
    result = CliRunner().invoke(
        cli, ["plan", "Qwen/Qwen2.5-32B", "--gpu", "H100", "-ngl", "20", "--offline"]
    )
    assert result.exit_code == 2 and "--n-gpu-layers is llama.cpp's" in result.output
    code, out = _cli("-ngl", "-1")
    assert code == 2 and "-ngl" in out
