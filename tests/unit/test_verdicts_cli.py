"""Verdicts that say what the engine will do (issue 33), through the real command: a load
failure named as one, one verdict for a ``--num-gpus`` run (the chosen layout's), and a
recommendation that changes the user's own flags before it adds GPUs."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.unit.test_cli import OFFLINE

CLI = [sys.executable, "-m", "servefit.cli.main"]


def run(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env=OFFLINE, timeout=180, check=False
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_weights_larger_than_the_device_are_a_load_failure_without_negative_memory():
    # Llama-3.1-70B in bf16: 70.55 B x 2 bytes = 131.45 GiB of weights, an L4 shows CUDA
    # 22.05 GiB: vLLM dies loading the first shards, never reaching the KV-cache sizing
    args = ["plan", "meta-llama/Llama-3.1-70B", "--gpu", "L4", "--no-performance"]
    doc = json.loads(run(*args, "--json").stdout)
    reasons = " ".join(doc["verdict"]["reasons"])
    assert "fails while loading them (CUDA out of memory)" in reasons
    assert "no memory is left for the KV cache" not in reasons
    done = run(*args)
    assert done.returncode == 1
    text = " ".join(done.stdout.split())  # rich wraps lines at the terminal's width
    assert "Available KV cache memory: none: the engine stops loading the weights" in text
    assert not re.search(r"-\d[\d.,]* GiB", text), text  # no negative memory


def test_a_num_gpus_run_has_the_chosen_layouts_verdict_only():
    done = run(
        "plan", "meta-llama/Llama-3.1-70B", "--gpu", "H100", "--max-model-len", "32768",
        "--num-gpus", "8", "--no-performance", "--json",
    )  # fmt: skip
    doc = json.loads(done.stdout)
    best = doc["scaling"]["best"]
    assert best is not None
    tp = int(re.match(r"TP(\d+)", best["layout"] if isinstance(best, dict) else best)[1])
    # the plan, the verdict and the exit code are one replica of that layout's
    assert doc["settings"]["tensor_parallel_size"] == tp
    assert doc["fits"] is True and done.returncode == 0
    assert doc["recommendation"] is None  # no second, contradicting layout
    text = run(
        "plan", "meta-llama/Llama-3.1-70B", "--gpu", "H100", "--max-model-len", "32768",
        "--num-gpus", "8", "--no-performance",
    ).stdout  # fmt: skip
    assert "DOES NOT FIT" not in text and "Recommendation" not in text


def test_a_larger_budget_comes_before_more_gpus():
    # Qwen3-32B in bf16 on an H100 (79.21 GiB visible): 61.0 GiB of weights; at vLLM's 0.92
    # the KV cache gets ~8.6 GiB, and one request of 40,960 tokens needs 40,960 x 256 KiB
    # (64 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes) = 10 GiB. At 0.95 the budget is
    # 0.03 x 79.21 = 2.4 GiB larger: ~11 GiB, it fits on the same one GPU.
    done = run(
        "plan", "Qwen/Qwen3-32B", "--gpu", "H100", "--max-model-len", "40960",
        "--max-num-seqs", "256", "--no-performance", "--json",
    )  # fmt: skip
    assert done.returncode == 1
    rec = json.loads(done.stdout)["recommendation"]
    changes = {c["flag"]: c for c in rec["changes"]}
    assert set(changes) == {"--gpu-memory-utilization"}, changes
    assert changes["--gpu-memory-utilization"]["after"] == "0.95"
    assert "--tensor-parallel-size" not in rec.get("command", "")


def test_an_open_loop_rate_the_server_cannot_complete_is_an_overload_not_a_misfit():
    # Qwen3-8B in bf16 reads its 15.1 GB of weights every decode step: on an A40 (696 GB/s,
    # datasheet) a step takes at least 15.1 / 696 = 21.7 ms, so 256 sequences in flight
    # (vLLM's --max-num-seqs) of 256 output tokens complete at most 256 / (256 x 21.7 ms)
    # = 46 requests a second: 50 a second cannot be kept up with, whatever the rest costs.
    flags = ["--gpu", "A40", "--max-model-len", "8192", "--input-len", "1024"]
    flags += ["--output-len", "256", "--max-num-seqs", "256"]
    over = run("plan", "Qwen/Qwen3-8B", *flags, "--request-rate", "50", "--json")
    assert over.returncode == 0  # the deployment fits: capacity is not the problem
    perf = json.loads(over.stdout)["performance"]
    assert perf["offered_rate_per_s"] == 50
    assert perf["sustainable_rate_per_s"] < 46
    assert perf["queue_growth_per_s"] == perf["offered_rate_per_s"] - perf["sustainable_rate_per_s"]
    text = " ".join(run("plan", "Qwen/Qwen3-8B", *flags, "--request-rate", "50").stdout.split())
    assert "overloaded: 50.00 req/s offered" in text and "the queue grows by" in text
    # one request alone takes ~7 s: at 0.5 a second ~4 are in flight, no queue builds
    calm = json.loads(
        run("plan", "Qwen/Qwen3-8B", *flags, "--request-rate", "0.5", "--json").stdout
    )
    assert calm["performance"]["queue_growth_per_s"] == 0
    closed = json.loads(run("plan", "Qwen/Qwen3-8B", *flags, "--concurrency", "4", "--json").stdout)
    assert closed["performance"]["queue_growth_per_s"] is None


def test_an_unbundled_id_offline_names_the_bundled_checkpoint_it_derives_from():
    # Qwen2.5-7B-Instruct-1M is not bundled (the checkpoint it derives from is); an -AWQ
    # export of a bundled id neither
    done = run("plan", "Qwen/Qwen2.5-7B-Instruct-1M", "--gpu", "H100", "--offline")
    assert done.returncode == 2
    assert "Close bundled entries: Qwen/Qwen2.5-7B-Instruct," in done.stderr  # its base first
    awq = run("plan", "Qwen/Qwen3-8B-AWQ", "--gpu", "H100", "--offline")
    assert "Close bundled entries: Qwen/Qwen3-8B," in awq.stderr
    nothing = run("plan", "foo/bar", "--gpu", "H100", "--offline")
    assert nothing.returncode == 2 and "Close bundled entries" not in nothing.stderr


def test_a_context_limit_names_the_config_it_comes_from(tmp_path):
    # the bundled entry's max_position_embeddings (Qwen3-8B: 40,960) refuses 50,000 tokens;
    # the reason says which file set the limit (a sibling checkpoint may allow more)
    doc = json.loads(
        run(
            "plan",
            "Qwen/Qwen3-8B",
            "--gpu",
            "H100",
            "--offline",
            "--max-model-len",
            "50000",
            "--no-performance",
            "--json",
        ).stdout
    )
    reason = next(r for r in doc["verdict"]["reasons"] if "max_position_embeddings" in r)
    assert "from the bundled entry for Qwen/Qwen3-8B" in reason and "aiconfigurator" in reason
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**catalog_config("Qwen/Qwen3-8B")}))
    from_file = json.loads(
        run(
            "plan",
            str(config),
            "--gpu",
            "H100",
            "--max-model-len",
            "50000",
            "--no-performance",
            "--json",
        ).stdout
    )
    assert any(f"the config file {config}" in r for r in from_file["verdict"]["reasons"])


def catalog_config(model_id: str) -> dict:
    from servefit.adapters.catalog import find_catalog_model

    entry = find_catalog_model(model_id)
    assert entry is not None
    return entry.config


def test_a_reason_is_printed_as_written_even_with_brackets(tmp_path):
    # a path with [brackets] in a reason is text, not terminal markup to swallow
    folder = tmp_path / "[exp-1]"
    folder.mkdir()
    config = folder / "config.json"
    config.write_text(json.dumps(catalog_config("Qwen/Qwen3-8B")))
    out = run("plan", str(config), "--gpu", "H100", "--max-model-len", "50000", "--no-performance")
    assert out.returncode == 1
    assert "[exp-1]" in " ".join(out.stdout.split())
