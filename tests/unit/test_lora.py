"""--enable-lora as vLLM 0.32 allocates it (vllm/lora/layers/): max_loras zeroed slots in every
linear layer, the embedding and the LM head, loaded before the KV cache is sized. The slot
sizes are worked out by hand below from the layer shapes."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.core.lora import LoraSettings, lora_bytes_per_gpu
from servefit.core.plan import ServeSettings, plan_capacity
from servefit.errors import InvalidArgumentError
from servefit.preflight.vllm_args import parse_vllm_command

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
H, KV, MLP, VOCAB, LAYERS = 4096, 1024, 14336, 128_256, 32


def _by_hand(rank: int, slots: int, tp: int) -> int:
    """Column-parallel slices (q, k, v, gate, up): R x in + out/TP x R each; row-parallel
    (o, down): R x in/TP + out x R; the embedding and the LM head: R x (vocab + hidden) each;
    bfloat16."""
    column = rank * (H + H // tp) + 2 * rank * (H + KV // tp) + 2 * rank * (H + MLP // tp)
    row = rank * (H // tp + H) + rank * (MLP // tp + H)
    ends = 2 * rank * (VOCAB + H)
    return slots * (LAYERS * (column + row) + ends) * 2


@pytest.mark.parametrize(("rank", "slots", "tp"), [(16, 1, 1), (64, 4, 1), (16, 2, 2)])
def test_the_slots_are_the_layer_shapes_times_rank_and_slots(catalog_model, rank, slots, tp):
    spec = catalog_model(LLAMA).spec
    got = lora_bytes_per_gpu(spec, LoraSettings(max_loras=slots, max_lora_rank=rank), tp)
    assert got == _by_hand(rank, slots, tp)
    if (rank, slots, tp) == (16, 1, 1):
        assert got == 92_356_608  # 88.1 MiB: one rank-16 slot of Llama-3.1-8B


def test_the_slots_are_model_memory_before_the_kv_cache(catalog_model, gpu):
    spec, device = catalog_model(LLAMA).spec, gpu("H100-SXM")
    lora = LoraSettings(max_loras=4, max_lora_rank=64)
    base = plan_capacity(spec, device, ServeSettings(max_model_len=8192))
    with_lora = plan_capacity(spec, device, ServeSettings(max_model_len=8192, lora=lora))
    added = with_lora.memory.weights_bytes - base.memory.weights_bytes
    assert added == _by_hand(64, 4, 1)
    assert with_lora.memory.kv_cache_bytes == base.memory.kv_cache_bytes - added


def test_the_command_line_carries_the_flags_both_ways():
    args = ["vllm", "serve", LLAMA, "--enable-lora", "--max-loras", "4", "--max-lora-rank", "64"]
    read = parse_vllm_command(args).settings["lora"]
    assert (read.max_loras, read.max_lora_rank) == (4, 64)
    result = CliRunner().invoke(
        cli, ["plan", LLAMA, "--gpu", "H100", "--max-model-len", "8192", *args[3:], "--offline"]
    )
    assert result.exit_code == 0, result.output
    assert "--enable-lora --max-loras 4 --max-lora-rank 64" in result.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--max-loras", "2"], "need --enable-lora"),
        (["--enable-lora", "--max-lora-rank", "24"], "vLLM takes"),
        (["--enable-lora", "--max-loras", "0"], "at least 1"),
    ],
)
def test_sizes_vllm_refuses_are_refused(args, words):
    result = CliRunner().invoke(cli, ["plan", LLAMA, "--gpu", "H100", *args, "--offline"])
    assert result.exit_code == 2 and words in result.output, result.output


def test_a_moe_model_is_refused_naming_why(catalog_model):
    with pytest.raises(InvalidArgumentError, match="fused-MoE"):
        lora_bytes_per_gpu(catalog_model("Qwen/Qwen3-30B-A3B").spec, LoraSettings(), 1)
