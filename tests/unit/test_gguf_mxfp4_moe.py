"""llama.cpp's MXFP4_MOE GGUF type (issue 26): not one type but llama-quantize's mix
(llama-quant.cpp llama_tensor_get_type: "MoE tensors -> MXFP4, other tensors -> Q8_0", the
output head Q8_0), the file ggml-org publishes gpt-oss in. ggml's block_mxfp4 is 32 four-bit
values and one E8M0 scale byte: 17 bytes a block."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from servefit.adapters.model_source import load_model
from servefit.app.resolve import as_gguf
from servefit.cli.main import cli
from servefit.core.quant_formats import gguf
from servefit.core.quant_spec import gguf_quant
from servefit.core.weights import weight_bytes
from servefit.errors import ConfigError
from servefit.units import GIB_BYTES

# gpt-oss-20b's routed experts: 24 layers x 32 experts x (gate/up 5,760 x 2,880 + down
# 2,880 x 2,880) = 24 x 32 x 3 x 2,880^2 weights
EXPERT_WEIGHTS = 24 * 32 * 3 * 2880 * 2880


def _bytes(kind: str) -> float:
    return weight_bytes(as_gguf(load_model("openai/gpt-oss-20b", allow_hub=False), kind).spec)


def test_only_the_experts_leave_q8_0():
    q8 = gguf("q8_0")
    # per expert weight: Q8_0's bits against MXFP4's 4 bits + one scale byte per 32
    saved = EXPERT_WEIGHTS * (q8.bits / 8 - (4 / 8 + 1 / 32))
    assert _bytes("q8_0").total_bytes - _bytes("MXFP4_MOE").total_bytes == pytest.approx(saved)


def test_the_mix_is_the_size_of_ggml_orgs_file():
    # llama.cpp benches/dgx-spark.md (llama-bench): "gpt-oss 20B MXFP4 MoE | 11.27 GiB |
    # 20.91 B"; the norms, biases and sinks the file keeps in f32 are the rest
    assert _bytes("mxfp4_moe").total_bytes / GIB_BYTES == pytest.approx(11.27, rel=0.01)


def test_a_dense_model_is_all_q8_0():
    dense = load_model("Qwen/Qwen3-8B", allow_hub=False)
    mix = weight_bytes(as_gguf(dense, "MXFP4_MOE").spec).total_bytes
    assert mix == weight_bytes(as_gguf(dense, "Q8_0").spec).total_bytes


def test_the_type_is_named_among_the_known_ones_and_planned_on_llama_cpp():
    with pytest.raises(ConfigError, match="MXFP4_MOE"):
        gguf_quant("q9_9")
    args = ["plan", "openai/gpt-oss-20b", "--gpu", "GB10", "--engine", "llama.cpp"]
    result = CliRunner().invoke(cli, [*args, "--gguf", "MXFP4_MOE", "--offline"])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "gguf-mxfp4 experts, gguf-q8_0 elsewhere" in flat
    assert "llama-server -m gpt-oss-20b-MXFP4_MOE.gguf" in flat
