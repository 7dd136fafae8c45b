"""Hostile input to the real command (``python -m servefit.cli.main`` in a subprocess): each
row of issue 28's table, F3-F14, is exit 0/1/2 with a line that names what to fix, never an
internal error (exit 3) and never a traceback. The secrets rows (F1, F2) are
``test_no_secret_leaks.py``; F13 (bench workers reaped) is ``tests/bench/test_interruption.py``.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.corpus import STARTUP_LOGS
from tests.null_server_cli import page
from tests.unit.test_cli import OFFLINE

CLI = [sys.executable, "-m", "servefit.cli.main"]
TIMEOUT_S = 120  # against a hang only
MODEL = "Qwen/Qwen3-8B"  # in the bundled catalog: planned offline
REFERENCE = STARTUP_LOGS


def run(*args: str, stdin: str | None = None, env: dict | None = None):
    done = subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        input=stdin,
        env=env or OFFLINE,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert "internal error" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("command", ["plan", "compare", "cost"])
@pytest.mark.parametrize(
    "name",
    ["a" * 300 + "/" + "b" * 300, "x" * 5000, "org/" + "y" * 120],
    ids=["two-300-char-parts", "5000-chars", "hub-part-over-96"],
)
def test_f3_a_model_name_no_file_system_or_hub_holds_is_exit_2(command, name):
    gpu = ["--gpus", "H100,A40"] if command == "compare" else ["--gpu", "H100"]
    done = run(command, name, *gpu)
    assert done.returncode == 2
    assert "error (model not found)" in done.stderr
    assert len(done.stderr) < 600  # the name is cut where it is quoted, not repeated whole


ENTRY = [sys.executable, "-c", "from servefit.cli.entry import main; main()"]  # the script


def test_f4_ctrl_c_in_a_command_is_130_not_aborted():
    # check-log reads its log from a pipe this test keeps open, so the command waits inside
    # its read for the signal. A signal that lands while Python still imports is 130 too
    # (the console script's guard, test_entry.py); the in-command path, deterministic, is the
    # next test.
    proc = subprocess.Popen(
        [*ENTRY, "check-log", "-", MODEL, "--gpu", "H100"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=OFFLINE,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("INFO 01-01 00:00:00 [core.py:1] a first line\n")
        proc.stdin.flush()
        _wait_until_reading_a_pipe(proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Aborted!" not in err and "Traceback" not in err
    assert err.strip().endswith("interrupted")


def _wait_until_reading_a_pipe(proc: subprocess.Popen) -> None:
    """Until the child sleeps in a pipe read (Linux: /proc/PID/wchan), at most 30 s."""
    wchan = Path(f"/proc/{proc.pid}/wchan")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if "pipe" in wchan.read_text():
                return
        except OSError:
            return  # no /proc: the signal comes now, and is exit 130 all the same
        time.sleep(0.05)


def test_f4_ctrl_c_inside_a_command_in_process_is_130(monkeypatch):
    """The same, deterministic: the plan raises KeyboardInterrupt as a Ctrl-C would."""
    from servefit.app import plan as plan_app
    from servefit.cli import main as cli_main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(plan_app, "plan_deployment", interrupted)
    with pytest.raises(SystemExit) as exited:
        cli_main.main(["plan", MODEL, "--gpu", "H100"])
    assert exited.value.code == 130


@pytest.mark.parametrize("digits", [400, 5000])
def test_f5_huge_numbers_in_a_log_are_read_or_refused_cleanly(tmp_path, digits):
    huge = "9" * digits
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.32.0\n"
        f"INFO 01-01 00:00:00 [utils.py:1] non-default args: {{'max_model_len': {huge}}}\n"
        f"INFO 01-01 00:00:00 [gpu_worker.py:1] Model loading took {huge}.5 GiB\n"
        f"INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: {huge} tokens\n"
        f"INFO 01-01 00:00:00 [kv_cache_utils.py:1] Maximum concurrency for 4,096 tokens per "
        f"request: {huge}.25x\n"
        "INFO 01-01 00:00:00 [utils.py:1] non-default args: " + "{1: " * 20_000 + "\n"
    )
    done = run("check-log", str(log), MODEL, "--gpu", "H100", "--json")
    assert done.returncode in (0, 1, 2), done.stderr
    if done.returncode != 2:  # read: none of the implausible numbers became a fact
        doc = json.loads(done.stdout)
        logged = [c["logged"] for c in doc["comparisons"]]
        assert all(abs(v) < 1e30 for v in logged), logged


def test_f6_the_history_groups_db_holds_for_show(tmp_path):
    db = tmp_path / "mine.sqlite"
    saved = run("plan", MODEL, "--gpu", "H100", "--save", "--db", str(db), "--json")
    assert saved.returncode == 0, saved.stderr
    [row] = json.loads(run("history", "--db", str(db), "--json").stdout)
    other = tmp_path / "elsewhere.sqlite"  # SERVEFIT_DB: a different, empty history
    env = {**OFFLINE, "SERVEFIT_DB": str(other)}
    shown = run("history", "--db", str(db), "show", str(row["id"]), "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == row["id"]


@pytest.mark.parametrize("run_id", ["9" * 25, str(2**63), "0"])
def test_f7_an_id_no_history_holds_is_no_such_run(tmp_path, run_id):
    db = tmp_path / "h.sqlite"
    assert run("plan", MODEL, "--gpu", "H100", "--save", "--db", str(db)).returncode == 0
    done = run("history", "--db", str(db), "show", run_id)
    assert done.returncode == 2, done.stderr
    assert f"no run {run_id}" in done.stderr


def test_f9_an_integer_torch_dtype_without_a_quantization_config_is_refused(tmp_path):
    # Qwen2.5-7B's real config.json (the bundled catalog's), its torch_dtype replaced: the
    # 4-bit-looking file "fitted" an H100 at a quarter of its bytes
    source = Path(__file__).resolve().parents[2] / "src/servefit/data/models/Qwen__Qwen2.5-7B.json"
    config = json.loads(source.read_text())["config"]
    for dtype in ("int4", "int8", "uint8"):
        path = tmp_path / f"{dtype}.json"
        path.write_text(json.dumps({**config, "torch_dtype": dtype}))
        done = run("plan", str(path), "--gpu", "H100")
        assert done.returncode == 2, done.stdout
        assert "quantization_config" in done.stderr and "vLLM cannot load it" in done.stderr
    # a GPTQ checkpoint says how its weights are packed: planned
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    path = tmp_path / "gptq.json"
    path.write_text(json.dumps({**config, "torch_dtype": "float16", "quantization_config": gptq}))
    assert run("plan", str(path), "--gpu", "H100").returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--block-size", "3"], "multiple of 16"),
        (["--block-size", "7"], "multiple of 16"),
        (["--block-size", "24"], "multiple of 16"),
        (["--block-size", "256", "--vllm-version", "0.10"], "vLLM 0.10 takes 1, 8, 16"),
        (["--block-size", "48", "--vllm-version", "0.20"], "takes 1, 8, 16, 32, 64, 128, 256"),
    ],
)
def test_f10_a_block_size_vllm_refuses_is_exit_2(args, message):
    done = run("plan", MODEL, "--gpu", "H100", *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.parametrize("block", ["16", "48", "256"])
def test_f10_block_sizes_vllm_0_32_takes_plan(block):
    # v0.32.0: CacheConfig.block_size is any positive integer; FlashAttention's kernel
    # block is MultipleOf(16) (v1/attention/backends/flash_attn.py)
    done = run("plan", MODEL, "--gpu", "H100", "--block-size", block, "--no-performance")
    assert done.returncode == 0, done.stderr


def test_f10_the_cpu_backend_works_in_blocks_of_32():
    # v0.32.0 v1/attention/backends/cpu_attn.py: get_supported_kernel_block_sizes is
    # [MultipleOf(32)]
    done = run("plan", MODEL, "--gpu", "cpu", "--block-size", "16", "--no-performance")
    assert done.returncode == 2 and "multiple of 32" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu", "H100", "--gpu-memory-gib", "0.0001"],
        ["--gpu-memory-gib", "0.5", "--gpu-bandwidth-gbps", "900"],
        ["--gpu-memory-gib", "24", "--gpu-bandwidth-gbps", "0.001"],
    ],
)
def test_f11_a_device_no_model_could_run_on_is_exit_2(args):
    done = run("plan", MODEL, *args)
    assert done.returncode == 2, done.stdout
    assert "not a GPU's memory" in done.stderr or "bandwidth" in done.stderr
    assert "-0." not in done.stdout  # no negative byte counts


def test_f12_check_log_reads_dev_zero_to_its_limit_and_stops():
    done = run("check-log", "/dev/zero", MODEL, "--gpu", "H100")
    assert done.returncode == 2
    assert "only its first 64 MiB were read" in done.stderr
    assert "not a vLLM startup log" in done.stderr


def test_f12_a_log_longer_than_the_limit_is_read_to_it(tmp_path, monkeypatch):
    """In process, with the limit made small: a real startup log (the golden corpus's
    first) followed by junk past the limit is read to the limit, its startup lines whole."""
    from servefit.cli import check_log

    lines = json.loads(REFERENCE.read_text())["cases"][0]["log_lines"]
    head = "\n".join(lines) + "\n"
    path = tmp_path / "pod.log"
    path.write_text(head + "x" * 10_000 + "\n" * 1000)
    monkeypatch.setattr(check_log, "MAX_LOG_BYTES", len(head.encode()) + 100)
    monkeypatch.setattr(check_log, "MAX_LINE_BYTES", 4096)
    read = check_log._read_lines(str(path))
    assert read[: len(lines)] == lines
    assert len(read) == len(lines) + 1  # and the one cut line that crossed the limit
    assert read[-1] == "x" * 4096


def test_f8_and_f14_the_page_reports_its_port_and_answers_bad_run_ids_with_400(tmp_path):
    db = tmp_path / "h.sqlite"
    assert run("plan", MODEL, "--gpu", "H100", "--save", "--db", str(db)).returncode == 0
    with page("--db", str(db)) as url:  # exits 0 on Ctrl-C: asserted by page()
        assert url.startswith("http://127.0.0.1:")
        assert int(url.rstrip("/").rpartition(":")[2]) > 0  # the port the OS gave, not 0
        query = f"model={MODEL}&gpu=H100"
        for run_id in ("h" + "9" * 30, "h" + str(2**63), "h%C2%B2", "abc", "9" * 30):
            status, body = _get(f"{url}api/report.html?{query}&run={run_id}")
            assert status == 400, (run_id, status, body[:200])
            assert json.loads(body)["field"] == "run"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_history_store_refuses_nothing_it_wrote(tmp_path):
    """A run recorded through the CLI reads back through SQLite itself: plain JSON columns."""
    db = tmp_path / "h.sqlite"
    assert run("plan", MODEL, "--gpu", "H100", "--save", "--db", str(db)).returncode == 0
    with sqlite3.connect(db) as conn:
        (inputs,) = conn.execute("SELECT inputs_json FROM runs").fetchone()
    assert json.loads(inputs)["model"] == MODEL
