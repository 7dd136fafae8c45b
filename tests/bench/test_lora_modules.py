"""``bench --lora-modules``: requests spread over LoRA adapters by their names in the
``model`` field, as vLLM serves them (``vllm serve --lora-modules name=path``), against a real
null server that counts the names it was asked for (issue 26)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from servefit.bench.config import BenchConfig, lora_names
from servefit.bench.null_server import NullServerConfig
from servefit.bench.runner import run
from servefit.bench.schedules import Schedule
from servefit.bench.workloads import WorkloadConfig
from servefit.errors import InvalidArgumentError

from .conftest import ServerThread


@pytest.mark.parametrize("workers", [1, 2])
def test_each_adapter_gets_its_turn_and_each_record_names_it(tmp_path, workers):
    server = ServerThread(NullServerConfig()).start()
    try:
        cfg = BenchConfig(
            base_urls=(server.url,),
            workload=WorkloadConfig(num_requests=12, input_len=16, output_len=4),
            schedule=Schedule(concurrency=3),
            lora_modules=("sql", "chat", "code"),
            workers=workers,
        )
        result = run(cfg, api_key=None, out_dir=tmp_path / "run")
    finally:
        server.stop()
    assert result.summary.successful == 12
    assert server.server.models_asked == Counter({"sql": 4, "chat": 4, "code": 4})
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["request_id"])
    assert [r["model"] for r in records] == ["sql", "chat", "code"] * 4


def test_the_names_are_read_as_vllm_spells_them():
    assert lora_names(["a,b", "c=/adapters/c"]) == ("a", "b", "c")
    with pytest.raises(InvalidArgumentError, match="twice"):
        lora_names(["a", "a"])


def test_the_flag_on_the_command_line(instant_server, tmp_path):
    done = subprocess.run(
        [
            *(sys.executable, "-m", "servefit.cli.main", "bench", instant_server.url),
            *("--num-requests", "4", "--concurrency", "2", "--lora-modules", "x,y"),
            *("--output", str(tmp_path / "run")),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    assert Counter(json.loads(line)["model"] for line in lines) == Counter({"x": 2, "y": 2})
