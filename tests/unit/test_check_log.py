"""``check-log`` on every real startup log in benchmarks/fidelity/startup_logs.json, on a real
vLLM 0.32 CPU log, and on bad input.

The golden logs print no flags (their cases carry them), so each is checked as a user would:
``servefit check-log LOG MODEL --gpu H100-SXM --vllm-version V [flags]``. Tolerances as in
tests/golden/test_vllm_startup_logs.py: given the logged KV memory, "GPU KV cache size" and
"Maximum concurrency" within 1 % (plus the GiB rounding of the logged memory); end to end,
the KV memory within 5 % on H100 logs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.corpus import STARTUP_LOGS

from servefit.adapters.vllm_log import Refusal
from servefit.app.check_log import (
    LogRefusal,
    check_startup_log,
    explain_refusal,
)
from servefit.app.deployment import Deployment, Hardware
from servefit.cli.main import cli
from servefit.core.plan import ServeSettings
from servefit.units import GIB_BYTES

GOLDEN = STARTUP_LOGS
CASES = json.loads(GOLDEN.read_text())["cases"]
GIB_ROUNDING = 0.005 * GIB_BYTES

CPU_LOG_032 = [
    "(APIServer pid=17758) INFO 11-30 07:53:17 [api_utils.py:286] non-default args: "
    "{'enable_prompt_tokens_details': True, 'host': '127.0.0.1', 'port': 45921, 'model': "
    "'MODEL_DIR', 'max_model_len': 4096, 'enforce_eager': True, "
    "'served_model_name': ['tiny-llama'], 'enable_prefix_caching': True}",
    "(EngineCore pid=18127) INFO 11-30 07:54:40 [core.py:133] Initializing a V1 LLM engine "
    "(v0.32.0) with config: model='MODEL_DIR', dtype=torch.bfloat16, max_seq_len=4096, "
    "tensor_parallel_size=1",
    "(Worker pid=18364) INFO 11-30 07:55:18 [cpu_worker.py:260] Explicitly set (1.0/8.09) GiB "
    "for KV cache on node 0.",
    "(EngineCore pid=18127) INFO 11-30 07:55:18 [kv_cache_utils.py:2327] CPU KV cache size: "
    "2,097,152 tokens, Maximum concurrency for 4,096 tokens per request: 512.00x",
]
# The tiny Llama of tests/integration/make_tiny_model.py (config only: planning needs no weights)
TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "vocab_size": 1024,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _ids(cases):
    return [f"{i}-{c['name']}" for i, c in enumerate(cases)]


SETTINGS = set(ServeSettings.__dataclass_fields__)
# the logs check-log can be held to: a catalog model, the figures printed, nothing unmodelled
CHECKABLE = [
    c
    for c in CASES
    if c["catalog_model"]
    and not c.get("unmodelled")
    and {"gpu_kv_cache_tokens", "max_concurrency", "available_kv_cache_gib"} <= set(c["logged"])
]
# V1's line; V0's "kv_cache_size=X GiB" (0.6.4) and "reserved for KV Cache is X GiB" (0.6.5 on)
KV_LINE = re.compile(
    r"(?:Available KV cache memory: |kv_cache_size=|reserved for KV Cache is )([0-9.]+) ?GiB"
)


def _check(case):
    settings = {k: v for k, v in case["settings"].items() if k in SETTINGS and v is not None}
    d = Deployment(
        model=case["catalog_model"],
        hardware=Hardware(gpu=case.get("gpu_catalog", "H100-SXM")),
        settings=ServeSettings(vllm_version=case["vllm_version"], **settings),
        allow_hub=False,
    )
    given = [*settings, "vllm_version"]
    return check_startup_log(case["log_lines"], d, given_settings=given)


@pytest.mark.parametrize("case", CHECKABLE, ids=_ids(CHECKABLE))
def test_every_golden_log(case):
    checked = _check(case)
    by = {c.quantity: c for c in checked.comparisons}
    logged = case["logged"]
    # the V0 engine prints blocks ("# GPU blocks: N"), V1 tokens
    count, key = (
        ("kv_cache_blocks", "gpu_blocks")
        if case.get("engine_mode") == "V0"
        else ("kv_cache_tokens", "gpu_kv_cache_tokens")
    )
    assert by[count].logged == logged[key]
    assert by["max_concurrency"].logged == pytest.approx(logged["max_concurrency"])
    assert by["kv_cache_memory_bytes"].logged == pytest.approx(
        min(
            float(m.group(1)) * GIB_BYTES
            for line in case["log_lines"]
            if (m := KV_LINE.search(line))
        )
    )
    # a log that ends in vLLM's refusal is planned not to start
    assert [r.kind for r in checked.refusals] == (
        [] if checked.outcome.capacity.starts else [Refusal.MAX_MODEL_LEN_DOES_NOT_FIT]
    )
    if case["settings"].get("pipeline_parallel_size", 1) == 1:
        kv = by["kv_cache_memory_bytes"].logged
        tolerance = 0.01 + GIB_ROUNDING / kv
        for quantity in (count, "max_concurrency"):
            c = by[quantity]
            assert c.relative_error_given_logged_kv_memory == pytest.approx(0, abs=tolerance)
    if case.get("fitted"):  # the fresh logs' end-to-end error is the fidelity corpus's band
        assert by["kv_cache_memory_bytes"].relative_error == pytest.approx(0, abs=0.05)
    if "model_weights_gib" in logged and "weights_bytes" in by:
        assert by["weights_bytes"].logged == pytest.approx(logged["model_weights_gib"] * GIB_BYTES)


def test_a_finding_is_explained_as_budget_or_arithmetic():
    case = next(c for c in CASES if c["settings"]["pipeline_parallel_size"] == 1)
    checked = _check(case)
    for c in checked.comparisons:
        if c.is_finding and not c.is_arithmetic_finding and c.predicted_given_logged_kv_memory:
            assert "KV budget" in c.explain()


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    return folder


def _cpu_log(model_dir: Path) -> list[str]:
    return [line.replace("MODEL_DIR", str(model_dir)) for line in CPU_LOG_032]


def test_real_cpu_log_reads_model_and_flags_from_the_log(tiny_model):
    checked = check_startup_log(
        _cpu_log(tiny_model), Deployment(model="", hardware=Hardware()), model_given=False
    )
    plan = checked.outcome.capacity
    assert plan.engine == "vllm-cpu"
    assert plan.settings.vllm_version == "0.32"
    assert plan.settings.block_size == 128
    by = {c.quantity: c for c in checked.comparisons}
    assert by["kv_cache_tokens"].predicted == by["kv_cache_tokens"].logged == 2_097_152
    assert by["max_concurrency"].predicted == by["max_concurrency"].logged == 512.0
    assert checked.is_clean


def test_cli_json_has_the_issue_keys(tiny_model, tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(_cpu_log(tiny_model)))
    result = CliRunner().invoke(cli, ["check-log", str(log), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    keys = {"quantity", "logged", "predicted", "predicted_given_logged_kv_memory", "relative_error"}
    assert {c["quantity"] for c in doc["comparisons"]} == {
        "kv_cache_memory_bytes",
        "kv_cache_tokens",
        "max_concurrency",
    }
    for c in doc["comparisons"]:
        assert keys <= set(c)
    assert doc["engine_version"] == "0.32.0"


def test_cli_golden_log_with_model_and_flags(tmp_path):
    case = next(c for c in CASES if c["catalog_model"] == "Qwen/Qwen3-8B")
    log = tmp_path / "pod.log"
    log.write_text("\n".join(case["log_lines"]))
    s = case["settings"]
    args = ["check-log", str(log), case["catalog_model"], "--gpu", "H100-SXM", "--offline"]
    args += ["--vllm-version", case["vllm_version"], "--max-model-len", str(s["max_model_len"])]
    args += ["--gpu-memory-utilization", str(s["gpu_memory_utilization"])]
    args += ["--max-num-seqs", str(s["max_num_seqs"]), "--no-enable-prefix-caching"]
    args += ["--max-num-batched-tokens", str(s["max_num_batched_tokens"]), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    tokens = next(c for c in doc["comparisons"] if c["quantity"] == "kv_cache_tokens")
    assert tokens["relative_error_given_logged_kv_memory"] == pytest.approx(0, abs=0.011)


def test_gpu_log_without_gpu_names_the_flag(tmp_path):
    case = CASES[0]
    log = tmp_path / "pod.log"
    log.write_text("\n".join(case["log_lines"]))
    result = CliRunner().invoke(cli, ["check-log", str(log), case["catalog_model"], "--offline"])
    assert result.exit_code == 2
    assert "--gpu" in result.output


def test_not_a_vllm_log_is_one_line_exit_2(tmp_path):
    log = tmp_path / "notes.txt"
    log.write_text("hello\nworld\n")
    result = CliRunner().invoke(cli, ["check-log", str(log)])
    assert result.exit_code == 2
    assert "not a vLLM startup log" in result.output
    assert len(result.output.strip().splitlines()) == 1
    missing = CliRunner().invoke(cli, ["check-log", str(tmp_path / "absent.log")])
    assert missing.exit_code == 2


def test_a_refusing_log_exits_1_with_the_plans_words(tiny_model, tmp_path):
    refusal = (
        "(EngineCore pid=1) ERROR 11-30 07:55:18 [core.py:1] ValueError: To serve at least one "
        "request with the model's max seq len (4096), (0.06 GiB KV cache is needed, which is "
        "larger than the available KV cache memory (0.01 GiB). Based on the available memory, "
        "the estimated maximum model length is 640."
    )
    lines = [*_cpu_log(tiny_model)[:2], refusal]
    log = tmp_path / "refused.log"
    log.write_text("\n".join(lines))
    args = ["check-log", str(log), "--gpu", "cpu", "--gpu-memory-gib", "8"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "vLLM refused to start" in result.output
    assert "640" in result.output


def test_explain_refusal_quotes_the_recommendation(tiny_model):
    checked = check_startup_log(
        _cpu_log(tiny_model), Deployment(model="", hardware=Hardware()), model_given=False
    )
    text = explain_refusal(
        LogRefusal(kind=Refusal.NO_KV_CACHE_MEMORY, line="No available memory", detail={}),
        checked.outcome,
    )
    assert text.startswith("vLLM refused to start: no memory was left for the KV cache")
    assert "budget on this machine is smaller than planned" in text


def test_a_gpu_log_is_planned_on_the_total_it_prints():
    """The cookbook's Colab T4 (benchmarks/fidelity/startup_logs.json) shows CUDA 14.74 GiB
    where the catalog's T4 (an AWS board, nvidia-smi 15360 MiB) shows 14.56: vLLM budgeted
    0.894 x 14.74 GiB. Planned on the printed total, '# cuda blocks: 3637' comes out end to
    end within a few blocks (on the catalog's total it is 2.6 % short)."""
    case = next(c for c in CASES if c["name"].startswith("unsloth/Llama-3.2-3B"))
    checked = _check(case)
    by = {c.quantity: c for c in checked.comparisons}
    assert by["kv_cache_blocks"].relative_error == pytest.approx(0, abs=0.002)
    assert any("14.74 GiB" in note and "14.56 GiB" in note for note in checked.notes)
