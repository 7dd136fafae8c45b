"""servefit ui's JSON API through aiohttp's test client (in process, no browser): the answers
are the CLI's documents, every bad input is a 400 naming its field, no path is read from a
request, markup in a user string comes back escaped, and a non-loopback host is warned of."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from tests.ui.conftest import free_port
from tests.unit.test_cli import OFFLINE

from servefit.ui.server import is_loopback, make_app

CLI = [sys.executable, "-m", "servefit.cli.main"]
HERE = Path(__file__).parent
SEED = {"model": "Qwen/Qwen3.6-27B-FP8", "gpu": "A40", "max-model-len": "32k"}
SEED["max-num-seqs"] = "128"  # the README's seed example (the default 256 does not start)
HOSTILE = json.loads((HERE / "hostile_config.json").read_text())["_name_or_path"]


def call(
    requests: list[tuple[str, str, dict[str, Any]]],
    runs: tuple[Path, ...] = (),
    history_db: Path | None = None,
) -> list[tuple[int, dict[str, str], bytes]]:
    """Send ``requests`` (method, path, aiohttp keyword arguments) to one app, in order."""

    async def go() -> list[tuple[int, dict[str, str], bytes]]:
        async with TestClient(TestServer(make_app(runs, history_db))) as client:
            out = []
            for method, path, kwargs in requests:
                response = await client.request(method, path, **kwargs)
                out.append((response.status, dict(response.headers), await response.read()))
            return out

    return asyncio.run(go())


def get(path: str, params: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    return call([("GET", path, {"params": params or {}})])[0]


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({**SEED, "max-num-seqs": "abc"}, "max-num-seqs", "whole number"),
        ({**SEED, "max-model-len": "12q"}, "max-model-len", "max-model-len"),
        ({**SEED, "max-num-seqs": "0"}, "max-num-seqs", "positive"),
        ({**SEED, "gpu-memory-utilization": "nan"}, "gpu-memory-utilization", "finite"),
        ({**SEED, "kv-cache-dtype": "int3"}, "kv-cache-dtype", "one of"),
        ({**SEED, "target-concurrency": "4"}, "target-concurrency", "needs context"),
        ({**SEED, "gpu": "B9000"}, "gpu", "B9000"),
        ({"gpu": "A40"}, "model", "name a model"),
        ({**SEED, "gpu": "auto"}, "gpu", "not this machine"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(params, field, words):
    status, _, body = get("/api/plan", params)
    answer = json.loads(body)
    assert status == 400, answer
    assert answer["field"] == field and words in answer["error"], answer


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({**SEED, "model": "/etc/hostname"}, "model"),
        ({**SEED, "model": "~/models/config.json"}, "model"),
        ({**SEED, "model": "../../etc/x"}, "model"),
        ({**SEED, "model": "tests/ui"}, "model"),  # an id in form, but a folder here
        ({**SEED, "calibration": "/etc/hostname"}, "calibration"),
        ({**SEED, "bench": "/tmp"}, "bench"),
        ({**SEED, "model": "upload:../../etc"}, "model"),
        (
            {
                **SEED,
                "speculative-config": '{"method": "eagle3", "model": "/etc/x", '
                '"num_speculative_tokens": 2}',
            },
            "speculative-config",
        ),
    ],
)
def test_a_request_carrying_a_file_path_is_refused(params, field):
    status, _, body = get("/api/plan", params)
    answer = json.loads(body)
    assert status == 400 and answer["field"] == field, answer
    if field == "model":
        assert "reads no file paths" in answer["error"] or "uploaded" in answer["error"]


def test_an_unregistered_run_and_a_file_outside_static_are_refused():
    status, _, body = get("/api/report.html", {**SEED, "run": "1"})
    assert status == 400 and json.loads(body)["field"] == "run"
    for path in ("/static/..%2F..%2Fquery.py", "/static/query.py", "/static/%2Fetc%2Fhostname"):
        assert get(path)[0] == 404, path


def test_the_page_and_its_files_come_from_the_package_with_a_strict_policy():
    status, headers, body = get("/")
    assert status == 200 and b'src="/static/app.js"' in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    html = body.decode()
    assert "http://" not in html and "https://" not in html  # nothing from the network
    for name in ("index.html", "app.js", "app.css"):
        assert resources.files("servefit.ui").joinpath("static", name).is_file()
        text = resources.files("servefit.ui").joinpath("static", name).read_text()
        assert "https://" not in text and "http://" not in text, name
    js = resources.files("servefit.ui").joinpath("static", "app.js").read_text()
    assert "innerHTML" not in js and "eval(" not in js


def test_a_hostile_model_name_is_escaped_in_the_report():
    config = (HERE / "hostile_config.json").read_bytes()
    ((status, _, body),) = call(
        [("POST", "/api/upload", {"data": config, "params": {"name": "c"}})]
    )
    assert status == 200, body
    model = json.loads(body)["model"]
    assert json.loads(body)["name"] == HOSTILE
    # the upload lives in the server's memory: ask the same app for the report
    results = call(
        [
            ("POST", "/api/upload", {"data": config, "params": {"name": "<b>x</b>.json"}}),
            ("GET", "/api/report.html", {"params": {"model": model, "gpu": "A40"}}),
            ("GET", "/api/plan", {"params": {"model": model, "gpu": "A40"}}),
        ]
    )
    (_, _, up), (status, headers, html), (_, _, plan) = results
    assert json.loads(up)["model"] == model  # the same content, the same id
    text = html.decode()
    assert status == 200 and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "<img" not in text and "<script>alert" not in text
    assert "script-src" not in headers["Content-Security-Policy"]  # the report runs nothing
    assert json.loads(plan)["plan"]["model"]["id"] == HOSTILE  # JSON carries it as data


def test_an_upload_that_is_not_a_config_is_a_400():
    for data in (b"[1, 2]", b"\xff\xfe{}", b"{" * 10, b"{}"):
        ((status, _, body),) = call([("POST", "/api/upload", {"data": data})])
        assert status == 400, (data, body)
        assert json.loads(body)["error"]


def test_the_capacity_answer_is_the_plans_without_the_simulation():
    (_, _, fast), (_, _, full) = call(
        [("GET", "/api/capacity", {"params": SEED}), ("GET", "/api/plan", {"params": SEED})]
    )
    fast_plan, full_view = json.loads(fast)["plan"], json.loads(full)
    full_plan = full_view["plan"]
    assert fast_plan["performance"] is None and full_plan["performance"] is not None
    for key in ("memory", "verdict", "vllm_command", "recommendation", "settings"):
        assert fast_plan[key] == full_plan[key], key
    assert set(full_view["charts"]) == {"memory", "curve"}
    assert full_view["cli"] == (
        "servefit plan Qwen/Qwen3.6-27B-FP8 --gpu A40 --max-model-len 32000 --max-num-seqs 128"
    )
    assert [s for s, _ in full_view["rows"]][:3] == ["Model", "Memory", "Workload"]


SEED_FLAGS = ["--max-num-seqs", "128", "--concurrency", "64", "--input-len", "2k"]
SEED_FLAGS += ["--slo-ttft-ms", "2000", "--json"]


def _plan_cli(*flags: str) -> str:
    """``servefit plan`` of the seed deployment with ``flags``: its ``--json`` document."""
    cli = subprocess.run(
        [*CLI, "plan", SEED["model"], "--gpu", "A40", "--max-model-len", "32k", *flags],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=120,
    )
    assert cli.returncode in (0, 1), cli.stderr
    return cli.stdout


def test_the_export_is_plan_json_for_the_same_flags_with_a_workload():
    params = {**SEED, "concurrency": "64", "input-len": "2k", "slo-ttft-ms": "2000"}
    status, headers, body = get("/api/plan.json", params)
    assert status == 200 and "attachment" in headers["Content-Disposition"]
    assert body.decode() == _plan_cli(*SEED_FLAGS)
    assert json.loads(body)["verdict"]["workload_runs"] is not None  # the workload is judged


def test_a_speculative_plan_is_plan_json_for_the_same_flags():
    spec = '{"method":"mtp","num_speculative_tokens":1}'
    params = {**SEED, "speculative-config": spec, "acceptance-rate": "0.8", "concurrency": "4"}
    status, _, body = get("/api/plan.json", params)
    assert status == 200, body
    flags = ["--max-num-seqs", "128", "--speculative-config", spec, "--acceptance-rate", "0.8"]
    assert body.decode() == _plan_cli(*flags, "--concurrency", "4", "--json")
    assert "--speculative-config" in json.loads(body)["vllm_command"]


def test_an_image_workload_is_plan_json_for_the_same_flags():
    params = {
        "model": "Qwen/Qwen3-VL-8B-Instruct",
        "gpu": "H100",
        "image-size": "1920x1080",
        "images-per-request": "2",
        "concurrency": "4",
    }
    status, _, body = get("/api/plan.json", params)
    assert status == 200, body
    flags = ["--image-size", "1920x1080", "--images-per-request", "2", "--concurrency", "4"]
    cli = subprocess.run(
        [*CLI, "plan", "Qwen/Qwen3-VL-8B-Instruct", "--gpu", "H100", *flags, "--json"],
        capture_output=True,
        text=True,
        env=OFFLINE,
        check=True,
    )
    assert body.decode() == cli.stdout
    assert json.loads(body)["performance"]["workload"].startswith("5104 in")  # 2 x 2,040
    status, _, body = get("/api/plan", {**params, "image-size": "1920"})
    assert status == 400 and b"image-size" in body


def test_data_parallel_ranks_are_plan_json_for_the_same_flags():
    # a MoE model at DP 2 + EP on 2 x H100: the page's answer is `plan -dp 2 -ep`'s
    params = {
        "model": "Qwen/Qwen3-30B-A3B",
        "gpu": "H100-SXM",
        "max-model-len": "8192",
        "data-parallel-size": "2",
        "enable-expert-parallel": "true",
    }
    status, _, body = get("/api/plan.json", params)
    assert status == 200, body
    cli = subprocess.run(
        [
            *CLI,
            *("plan", "Qwen/Qwen3-30B-A3B", "--gpu", "H100-SXM", "--max-model-len", "8192"),
            *("--data-parallel-size", "2", "--enable-expert-parallel", "--json"),
        ],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert body.decode() == cli.stdout
    doc = json.loads(body)
    assert doc["settings"]["data_parallel_size"] == 2
    assert "--data-parallel-size 2" in doc["vllm_command"]
    bad = get("/api/plan.json", {**params, "data-parallel-size": "0"})
    assert bad[0] == 400 and b"data-parallel-size" in bad[2]


def test_compare_is_compare_json():
    params = {"compare-models": SEED["model"], "compare-gpus": "A40,H100-SXM"}
    params["max-model-len"] = "8k"
    status, _, body = get("/api/compare", params)
    doc = json.loads(body)
    assert status == 200, doc
    assert [(r["model"], r["gpu"]) for r in doc["rows"]] == [
        (SEED["model"], "A40"),
        (SEED["model"], "H100-SXM"),
    ]
    status, _, body = get("/api/compare", {**params, "compare-models": "/etc/x"})
    assert status == 400 and json.loads(body)["field"] == "compare-models"


def test_loopback_hosts():
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "192.168.1.4", "::", "example.org"))


def _serve_until_ready(args: list[str]) -> str:
    """Start ``servefit ui ARGS``, wait until it listens, stop it; its stderr."""
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "ui", "--port", str(port), *args],
        env=OFFLINE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    return err


def test_a_non_loopback_host_prints_a_warning():
    err = _serve_until_ready(["--host", "0.0.0.0"])
    assert "warning: --host 0.0.0.0 is not loopback" in err, err
    assert "warning" not in _serve_until_ready([])


def test_a_registered_run_is_reported_as_servefit_report_reports_it(bench_run):
    params = {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM", "max-model-len": "8k"}
    (_, _, catalog), (status, _, html) = call(
        [
            ("GET", "/api/catalog", {}),
            ("GET", "/api/report.html", {"params": {**params, "run": "1"}}),
        ],
        runs=(bench_run,),
    )
    runs = json.loads(catalog)["runs"]
    assert runs == [{"id": "1", "name": "run-a", "kind": "bench"}]  # no path leaves the server
    assert str(bench_run.parent) not in catalog.decode()
    cli = subprocess.run(
        [
            *CLI,
            "report",
            params["model"],
            "--gpu",
            "H100-SXM",
            "--max-model-len",
            "8k",
            "--bench",
            str(bench_run),
            "--format",
            "html",
        ],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=120,
    )
    assert status == 200 and cli.returncode == 0, cli.stderr
    assert html.decode() == cli.stdout.removesuffix("\n")
    assert "measured" in html.decode() and 'id="chart-ttft"' in html.decode()


def test_fit_is_fit_json():
    # the page's fit view answers what `servefit fit --json` prints for the same flags
    params = {"fit-gpu": "RTX-4090", "fit-task": "code", "fit-search": "qwen3 8b", "fit-top": "0"}
    status, _, body = get("/api/fit", params)
    assert status == 200, body
    cli = subprocess.run(
        [
            *(*CLI, "fit", "--gpu", "RTX-4090", "--task", "code"),
            *("--search", "qwen3 8b", "--top", "0", "--json"),
        ],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(body) == json.loads(cli.stdout)
    doc = json.loads(body)
    assert doc["rows"] and all("qwen3" in r["model"].lower() for r in doc["rows"])


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"fit-gpu": "B9000"}, "fit-gpu"),
        ({"fit-gpu": "A40", "fit-task": "poetry"}, "fit-task"),
        ({"fit-gpu": "A40", "fit-context": "0"}, "fit-context"),
        ({"fit-gpu": "A40", "fit-top": "many"}, "fit-top"),
        ({"fit-gpu": "A40", "fit-gguf": "Q9"}, "fit-gguf"),
        ({"fit-gpu": "A40", "fit-search": "no-such-model-anywhere"}, "fit-search"),
        ({"fit-gpu": "A40", "model": "/etc/passwd"}, "model"),
    ],
)
def test_a_bad_fit_field_is_a_400_naming_it(params, field):
    status, _, body = get("/api/fit", params)
    assert status == 400 and json.loads(body)["field"] == field
