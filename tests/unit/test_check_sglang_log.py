"""``check-log`` of SGLang start-up logs (issue 32): the lines public logs print, held against
servefit's SGLang plan; the pool given the logged memory is the logged token count."""

from __future__ import annotations

import json

from click.testing import CliRunner

from servefit.adapters.sglang_log import SglangLog, is_sglang_log, server_args
from servefit.cli.main import cli
from servefit.units import GIB_BYTES

# github.com/didier-durand/llms-in-clouds docs/sglang.md: QwQ-32B on 4 x L4 (TP 4), sglang
# 0.4.3.post4; its lines as printed (the TP0 rank's)
QWQ_L4 = """\
[2025-03-08 12:29:13 TP0] Load weight begin. avail mem=21.63 GB
[2025-03-08 12:29:21 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, \
avail mem=6.09 GB, mem usage=15.54 GB.
[2025-03-08 12:29:21 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB
[2025-03-08 12:29:21 TP0] Memory pool end. avail mem=2.09 GB
[2025-03-08 12:29:29 TP0] max_total_num_tokens=46611, chunked_prefill_size=2048, \
max_prefill_tokens=16384, max_running_requests=2049, context_len=131072
"""

# github.com/jerryzsj/my-deepseek-r1 README.md: DeepSeek-R1-Distill-Qwen-7B on an RTX 3090
# (0.4.2 era: no "mem usage", no "#tokens" on the KV line)
R1_3090 = """\
[2025-02-04 05:21:40 TP0] Load weight begin. avail mem=22.76 GB
[2025-02-04 05:29:17 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, \
avail mem=8.37 GB
[2025-02-04 05:29:17 TP0] KV Cache is allocated. K size: 2.82 GB, V size: 2.82 GB.
[2025-02-04 05:29:20 TP0] max_total_num_tokens=105531, chunked_prefill_size=2048, \
max_prefill_tokens=16384, max_running_requests=2049, context_len=131072
"""


def _check(text, tmp_path, *args):
    path = tmp_path / "sglang.log"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["check-log", str(path), *args, "--json"])
    return result.exit_code, result.output


def test_the_log_reads_as_sglang_prints_it():
    log = SglangLog.read(QWQ_L4.splitlines())
    assert is_sglang_log(QWQ_L4.splitlines())
    assert log.free_before_load_bytes.value == 21.63 * GIB_BYTES
    assert log.free_after_load_bytes.value == 6.09 * GIB_BYTES
    assert log.weights_bytes.value == 15.54 * GIB_BYTES  # the printed "mem usage"
    assert log.kv_cache_tokens.value == 46_611
    assert log.scheduler["max_running_requests"].value == 2049
    older = SglangLog.read(R1_3090.splitlines())
    # no "mem usage" before 0.4.3: loading took the difference of the two free figures
    assert older.weights_bytes.value == (22.76 - 8.37) * GIB_BYTES
    assert older.kv_cache_tokens.value == 105_531


def test_the_pool_given_the_logged_memory_matches_and_end_to_end_names_the_budget(tmp_path):
    code, out = _check(
        QWQ_L4, tmp_path, "Qwen/QwQ-32B", "--gpu", "L4", "--tp", "4", "--sglang-version", "0.4.3"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["engine"] == "sglang"
    kv = next(c for c in doc["comparisons"] if c["quantity"] == "kv_cache_tokens")
    # (6.09 - 21.63 x 0.15) GiB / 65,536 bytes a token = 46,620, logged 46,611
    assert abs(kv["predicted_given_logged_kv_memory"] - 46_611) <= 20
    weights = next(c for c in doc["comparisons"] if c["quantity"] == "weights_bytes")
    assert abs(weights["relative_error"]) < 0.02  # 15.29 GiB planned, 15.54 logged
    running = next(c for c in doc["comparisons"] if c["quantity"] == "max_running_requests")
    assert running["logged"] == 2049 and not running["is_finding"]


def test_the_older_log_is_held_the_same_way(tmp_path):
    code, out = _check(
        R1_3090,
        tmp_path,
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        "--gpu",
        "RTX-3090",
        "--sglang-version",
        "0.4.2",
    )
    assert code == 0
    kv = next(c for c in json.loads(out)["comparisons"] if c["quantity"] == "kv_cache_tokens")
    # (8.37 - 22.76 x 0.12) GiB / 57,344 bytes = 105,585: within the two figures' rounding
    assert abs(kv["predicted_given_logged_kv_memory"] - 105_531) <= 0.0002 * 105_531 + 60


def test_server_args_set_the_deployment_and_name_the_model(tmp_path):
    # a ServerArgs line as SGLang's dataclass repr prints it (constructed for this test: the
    # public logs above were posted without theirs)
    line = (
        "[2025-03-08 12:29:00] server_args=ServerArgs(model_path='Qwen/QwQ-32B', "
        "tokenizer_path='Qwen/QwQ-32B', tp_size=4, mem_fraction_static=0.85, "
        "context_length=None, chunked_prefill_size=2048, max_running_requests=None, "
        "kv_cache_dtype='auto', dtype='auto', quantization=None, device='cuda', "
        "schedule_policy=SchedulePolicy.LPM)"
    )
    args = server_args(line.split("ServerArgs(", 1)[1][:-1])
    assert args["tp_size"] == 4 and args["mem_fraction_static"] == 0.85
    assert "schedule_policy" not in args  # not a literal: left out
    code, out = _check(line + "\n" + QWQ_L4, tmp_path, "--gpu", "L4", "--sglang-version", "0.4.3")
    assert code == 0
    doc = json.loads(out)
    assert doc["model"] == "Qwen/QwQ-32B"
    assert "--tp-size 4" in doc["vllm_command"]
    assert "--chunked-prefill-size 2048" in doc["vllm_command"]


def test_an_sglang_log_without_a_pool_is_refused(tmp_path):
    code, out = _check(
        "[x TP0] Load weight begin. avail mem=21.63 GB\n", tmp_path, "Qwen/QwQ-32B", "--gpu", "L4"
    )
    assert code == 2 and "no pool size" in out


def test_a_server_args_value_of_the_wrong_type_is_named(tmp_path):
    line = "[x] server_args=ServerArgs(model_path='Qwen/QwQ-32B', tp_size='four')"
    code, out = _check(line + "\n" + QWQ_L4, tmp_path, "--gpu", "L4")
    assert code == 2 and "tp_size='four'" in out
