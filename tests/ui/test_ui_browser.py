"""servefit ui end to end: the real server (``servefit ui`` as a subprocess) and the page in a
real headless Chromium (Debian's package, driven by Playwright, launched as the report test
launches it). The issue's scenario: the seed example (Qwen/Qwen3.6-27B-FP8 on an A40 at 32k),
the context raised to 128k and the GPU changed to an A100 80GB; the page's numbers equal
``servefit plan --json`` for the same flags (the CLI run here), the export is that JSON byte
for byte, the permalink reproduces the page, Tab reaches every control, no console error."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.null_server_cli import free_port
from tests.report.test_report_html import CHROMIUM, CHROMIUM_ARGS, _open
from tests.unit.test_cli import OFFLINE

CLI = [sys.executable, "-m", "servefit.cli.main"]
MODEL = "Qwen/Qwen3.6-27B-FP8"
A100 = "A100-80GB-SXM"  # `servefit gpus`: the A100 SXM4 80GB (alias "a100")
SEED_FLAGS = ["--max-num-seqs", "128"]


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "ui", "--port", str(port)],
        env=OFFLINE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _plan_json(gpu: str, max_model_len: str) -> tuple[str, dict]:
    done = subprocess.run(
        [
            *CLI,
            "plan",
            MODEL,
            "--gpu",
            gpu,
            "--max-model-len",
            max_model_len,
            *SEED_FLAGS,
            "--json",
        ],
        capture_output=True,
        text=True,
        env=OFFLINE,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout, json.loads(done.stdout)


def _wait_for(page, query: str) -> None:
    """Until the page shows the plan of exactly ``query`` (its last re-plan's query)."""
    page.wait_for_function(
        "q => document.body.dataset.planQuery === q && "
        "!document.getElementById('view-plan').classList.contains('stale')",
        arg=query,
        timeout=60_000,
    )


def _shown(page) -> dict:
    return page.evaluate(
        """() => {
          const v = id => document.getElementById(id);
          return {headline: v('headline').textContent, fits: v('verdict').dataset.fits,
            kv_tokens: v('kv-tokens').dataset.value, kv_text: v('kv-tokens').textContent,
            max_concurrency: v('max-concurrency').dataset.value,
            command: v('vllm-command').textContent, ttft: v('ttft').dataset.value,
            charts: document.querySelectorAll('svg.chart').length,
            margin: v('margin').textContent, bands: v('bands').textContent,
            rows: document.querySelectorAll('#checklist td').length};
        }"""
    )


def _assert_tab_reaches_every_control(page, *, minimum: int) -> None:
    controls = page.evaluate(
        """() => [...document.querySelectorAll('input,select,button,a[href],textarea')]
            .filter(e => e.offsetParent !== null && !e.disabled).map(e => e.id)"""
    )
    assert all(controls) and len(controls) > minimum
    page.evaluate("document.activeElement.blur()")
    reached = []
    for _ in range(len(controls) + 5):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.id"))
    assert set(controls) <= set(reached), set(controls) - set(reached)


def _timings(page) -> dict[str, float]:
    data = page.evaluate("({...document.body.dataset})")
    return {"capacity_ms": float(data["capacityMs"]), "update_ms": float(data["updateMs"])}


def _assert_equals_cli(shown: dict, doc: dict) -> None:
    m = doc["memory"]
    assert shown["headline"] == doc["verdict"]["headline"]
    assert shown["fits"] == str(doc["fits"]).lower()
    assert int(shown["kv_tokens"]) == m["kv_cache_tokens"]
    assert shown["kv_text"] == f"{m['kv_cache_tokens']:,}"
    assert float(shown["max_concurrency"]) == m["max_concurrency"]
    assert shown["command"] == doc["vllm_command"]
    assert float(shown["ttft"]) == doc["performance"]["ttft_s"]
    assert shown["charts"] == 2 and shown["rows"] > 10
    # the margin and each figure's measured error, as the CLI's document has them
    margin = doc["verdict"]["margin"]
    assert (margin["text"] in shown["margin"]) if margin else shown["margin"] == ""
    tpot = doc["performance"]["error_bands"]["tpot"]
    assert (tpot["text"] if tpot else "TPOT unvalidated") in shown["bands"]


def test_the_issue_scenario_in_headless_chromium(server, tmp_path):
    manager, _ = _open(tmp_path)
    _, seed = _plan_json("A40", "32768")
    final_json, final = _plan_json(A100, "131072")
    with manager as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(f"{server}/?model=meta-llama/Llama-3.1-8B&gpu=H100-SXM")
        _wait_for(page, "model=meta-llama%2FLlama-3.1-8B&gpu=H100-SXM")
        page.click("#example")  # the seed example
        seed_query = "model=Qwen%2FQwen3.6-27B-FP8&gpu=A40&max-model-len=32768&max-num-seqs=128"
        _wait_for(page, seed_query)
        _assert_equals_cli(_shown(page), seed)

        page.fill("#max-model-len", "131072")
        _wait_for(page, seed_query.replace("32768", "131072"))
        timings = [_timings(page)]
        page.select_option("#gpu", A100)
        final_query = seed_query.replace("32768", "131072").replace("A40", A100)
        _wait_for(page, final_query)
        timings.append(_timings(page))
        shown = _shown(page)
        _assert_equals_cli(shown, final)
        assert shown["headline"] != seed["verdict"]["headline"] or shown["kv_tokens"] != str(
            seed["memory"]["kv_cache_tokens"]
        )

        # the export is `servefit plan --json` for the same flags, byte for byte
        export = page.request.get(server + page.get_attribute("#export-json", "href"))
        assert export.ok and export.text() == final_json
        html = page.request.get(server + page.get_attribute("#export-html", "href"))
        assert html.ok and final["verdict"]["headline"].split(":")[0] in html.text()

        # the permalink reproduces the page
        permalink = page.get_attribute("#permalink", "href")
        assert permalink == f"/?{final_query}"
        again = browser.new_page(viewport={"width": 1280, "height": 1000})
        again.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        again.goto(server + permalink)
        _wait_for(again, final_query)
        assert _shown(again) == shown
        assert again.input_value("#gpu") == A100 and again.input_value("#max-model-len") == "131072"

        # Tab reaches every control of the page, in the plan view and the compare view
        _assert_tab_reaches_every_control(page, minimum=30)
        page.click("#tab-compare")
        _assert_tab_reaches_every_control(page, minimum=30)
        assert page.is_visible("#compare-run") and not page.is_visible("#vllm-command")

        # the fit view lists what `servefit fit --json` lists for the same GPU and words
        page.click("#tab-fit")
        page.select_option("#fit-gpu", "RTX-4090")
        page.fill("#fit-search", "qwen3 8b")
        page.click("#fit-run")
        page.wait_for_selector("#fit-table tbody tr", timeout=120_000)
        shown_models = page.eval_on_selector_all(
            "#fit-table tbody tr td:first-child", "cells => cells.map((c) => c.textContent)"
        )
        fit = subprocess.run(
            [*CLI, "fit", "--gpu", "RTX-4090", "--search", "qwen3 8b", "--json"],
            capture_output=True,
            text=True,
            env=OFFLINE,
            timeout=300,
        )
        assert fit.returncode == 0, fit.stderr
        assert shown_models == [r["model"] for r in json.loads(fit.stdout)["rows"]]
        assert "view=fit" in page.url and "fit-search=qwen3+8b" in page.url
        _assert_tab_reaches_every_control(page, minimum=30)

        # the page update time, from the input event to the numbers on the page: the capacity
        # (verdict, KV cache, command) first, then speed and cost (the serving simulation)
        print(f"\npage update after an edit (ms): {timings}")
        for t in timings:
            assert 0 < t["capacity_ms"] <= t["update_ms"], t

        page.screenshot(path=str(tmp_path / "ui.png"), full_page=False)
        browser.close()
    assert problems == []
    assert (tmp_path / "ui.png").stat().st_size > 10_000


def test_a_hostile_model_name_is_text_on_the_page(server, tmp_path):
    """A config.json dropped on the page whose name is markup: shown as text, never run."""
    manager, _ = _open(tmp_path)
    config = json.loads(Path(__file__).with_name("hostile_config.json").read_text())
    hostile = config["_name_or_path"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with manager as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("dialog", lambda d: problems.append(f"dialog: {d.message}"))
        page.goto(f"{server}/?model={MODEL}&gpu=A40&max-model-len=4096")
        _wait_for(page, f"model={MODEL.replace('/', '%2F')}&gpu=A40&max-model-len=4096")
        page.set_input_files("#config-file", str(path))
        page.wait_for_function(
            "() => document.getElementById('model').value.startsWith('upload:') && "
            "document.body.dataset.planQuery.startsWith('model=upload')",
            timeout=60_000,
        )
        _wait_for(page, page.evaluate("document.body.dataset.planQuery"))
        assert page.text_content("#upload-name") == hostile
        assert hostile in page.inner_text("#checklist")
        assert page.evaluate("document.querySelectorAll('#checklist img, main img').length") == 0
        # the runs view (this session's run history) opens without an error either
        page.click("#tab-runs")
        page.wait_for_selector("#history-table tbody tr", timeout=60_000)
        assert "view=runs" in page.get_attribute("#permalink", "href")
        browser.close()
    assert problems == []
