"""servefit report end to end: a real benchmark against the null server (agent sessions,
cold then warm with ``--prefix-cache-compare``), recorded GPU samples, and the HTML report
opened in a real headless Chromium (Debian's package, driven by Playwright): no console
errors, every plot rendered, the key numbers in the DOM, the embedded JSON read back by
``JSON.parse``. The null server serves the name ``servefit-null``: the reports that read it
as the planned model declare that alias (``--served-model-name``); without it the report
says the measurement is not this model (the evidence check)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.null_server_cli import null_server
from tests.unit.test_cli import OFFLINE

CLI = [sys.executable, "-m", "servefit.cli.main"]
TRACE = Path(__file__).parent.parent / "golden" / "gpu_traces" / "decode_bandwidth_bound.jsonl"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _cli(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=OFFLINE, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory) -> Path:
    """A real `servefit bench` run (agent sessions, cold and warm) against a real
    `servefit null-server`."""
    with null_server("--ttft-ms", "15", "--itl-ms", "4") as url:
        out = tmp_path_factory.mktemp("bench")
        _cli(
            "bench",
            url,
            "--workload",
            "agent",
            "--turns",
            "4",
            "--input-len",
            "256",
            "--output-len",
            "32",
            "--concurrency",
            "4",
            "--num-requests",
            "8",
            "--prefix-cache-compare",
            "--output",
            str(out),
            "--json",
        )
        return out


REPORT_ARGS = (
    "report",
    "meta-llama/Llama-3.1-8B",
    "--gpu",
    "H200",
    "--max-model-len",
    "8192",
    "--input-len",
    "512",
    "--prefix-len",
    "256",
    "--output-len",
    "32",
    "--turns",
    "4",
    "--concurrency",
    "4",
    "--served-model-name",
    "servefit-null",
)


@pytest.fixture(scope="module")
def report_files(bench_dir, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("report")
    files = {}
    for fmt in ("html", "md", "json"):
        files[fmt] = out / f"report.{fmt}"
        _cli(
            *REPORT_ARGS,
            "--bench",
            str(bench_dir),
            "--gpu-samples",
            str(TRACE),
            "--format",
            fmt,
            "-o",
            str(files[fmt]),
        )
    return files


def test_markdown_has_the_checklist(report_files):
    md = report_files["md"].read_text()
    for section in (
        "## Model",
        "## Memory",
        "## Workload",
        "## Performance",
        "## Scaling",
        "## Economics",
        "## Diagnosis",
    ):
        assert section in md
    assert "measured" in md and "bandwidth-bound" in md
    assert "| throughput | measured:" in md  # the economics from the bench's throughput


def test_a_bench_of_another_model_is_a_finding_not_a_diagnosis(bench_dir, tmp_path):
    """Without the alias the null server's `servefit-null` is not the planned Llama: the
    diagnosis is that finding alone, and the economics stay predicted."""
    out = tmp_path / "r.json"
    _cli(*REPORT_ARGS[:-2], "--bench", str(bench_dir), "--format", "json", "-o", str(out))
    doc = json.loads(out.read_text())
    (finding,) = doc["diagnosis"]
    assert finding["verdict"] == "not this model on this GPU"
    assert (
        "`servefit-null`" in finding["evidence"]
        and "meta-llama/Llama-3.1-8B" in finding["evidence"]
    )
    assert doc["cost_basis"].startswith("predicted")


def test_json_report_and_compare(report_files, tmp_path):
    doc = json.loads(report_files["json"].read_text())
    assert doc["schema_version"] == 1
    assert doc["measured"]["num_requests"] == 32  # 8 sessions x 4 turns, all completed
    groups = {g["label"]: len(g["ttft_values_s"]) for g in doc["measured"]["groups"]}
    assert groups == {"cold": 32, "warm": 32}  # --prefix-cache-compare: both runs' records
    assert len(doc["measured"]["turn_ttft_s"]) == 4
    assert doc["gpu"]["num_samples"] == 150
    other = tmp_path / "b.json"
    _cli(*REPORT_ARGS[:3], "H100", *REPORT_ARGS[4:], "--format", "json", "-o", str(other))
    md = _cli("report", "--compare", str(report_files["json"]), str(other)).stdout
    assert "H200-SXM" in md and "H100-SXM" in md and "| TPOT |" in md


def _open(path: Path):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Chromium (scripts/test_deps.sh)")
        pytest.skip("Chromium is not installed here (scripts/test_deps.sh installs it)")
    from playwright.sync_api import sync_playwright

    return sync_playwright(), path


def test_html_renders_in_headless_chromium(report_files):
    manager, path = _open(report_files["html"])
    doc = json.loads(report_files["json"].read_text())
    with manager as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(path.resolve().as_uri())
        charts = page.eval_on_selector_all(
            "svg.chart",
            """els => els.map(e => ({id: e.id, width: e.getBoundingClientRect().width,
                 shapes: e.querySelectorAll('rect,polyline,circle').length}))""",
        )
        text = page.inner_text("body")
        embedded = page.evaluate(
            "JSON.parse(document.getElementById('servefit-report').textContent)"
        )
        ticks = page.eval_on_selector_all(
            "#chart-ttft .tick[text-anchor=end], #chart-tpot .tick[text-anchor=end]",
            "els => els.map(e => e.textContent)",
        )
        legends = page.eval_on_selector_all(
            "#chart-ttft .legend", "els => els.map(e => e.textContent)"
        )
        browser.close()
    assert problems == []
    ids = {c["id"] for c in charts}
    assert {
        "chart-memory",
        "chart-curve",
        "chart-turns",
        "chart-ttft",
        "chart-tpot",
        "chart-gpu0",
    } <= ids
    for c in charts:
        assert c["width"] > 100 and c["shapes"] >= 3, c
    perf = doc["plan"]["performance"]
    assert doc["title"] in text
    assert f"{perf['output_throughput_tok_per_s']:,.0f} tok/s predicted" in text
    assert "bandwidth-bound" in text and "add batch" in text
    assert embedded["title"] == doc["title"] and embedded["measured"] == doc["measured"]
    assert legends == ["cold", "warm"]
    assert ticks and all(t.isdigit() for t in ticks), ticks  # the y axes: whole requests
