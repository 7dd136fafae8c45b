"""The valid artifacts ``benchmarks/fuzz_artifacts.py`` mutates, each built in-process
through servefit's own types (the records and summary as ``servefit bench`` writes them, the
GPU samples as the monitor does, a recording of a healthy host, a calibration profile), and
the case those mutations make."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

MODEL = "Qwen/Qwen3-0.6B"
GPU = "H100"


# -- a case -----------------------------------------------------------------------------


@dataclass
class ArtifactCase:
    """One mutated artifact: its files (relative path -> bytes) and what was done."""

    kind: str
    files: dict[str, bytes]
    description: str = ""
    targets: list[str] = field(default_factory=list)  # the files mutated


# -- the valid artifacts ------------------------------------------------------------------


def _records(first_id: int, num: int) -> list[Any]:
    from servefit.bench.records import Outcome, RequestRecord

    return [
        RequestRecord(
            request_id=first_id + i,
            outcome=Outcome.OK,
            session_id=i % 2,
            turn=i // 2,
            scheduled_s=1.0 + i,
            sent_s=1.0 + i,
            headers_s=1.01 + i,
            chunk_s=[1.05 + i + 0.01 * k for k in range(8)],
            done_s=1.2 + i,
            prompt_tokens=100,
            completion_tokens=8,
            cached_tokens=32 if i else 0,
            max_tokens=8,
        )
        for i in range(num)
    ]


def _summary_json(records: list[Any], cold: list[Any] | None = None) -> str:
    from servefit.bench.metrics import summarize
    from servefit.bench.runner import SUMMARY_SCHEMA_VERSION, BenchResult, turn_stats
    from servefit.bench.turns import compare_cache

    result = BenchResult(
        schema_version=SUMMARY_SCHEMA_VERSION,
        servefit_version="fuzz",
        config={"concurrency": 2},
        server={"base_urls": ["http://127.0.0.1:1"], "model": MODEL},
        interrupted=False,
        summary=summarize(records),
        turns=turn_stats(records),
        server_metrics={"preemptions": 0.0},
        server_latency_s={"ttft": {"p50": 0.05}},
        server_peaks={"kv_cache_usage": 0.4, "requests_waiting": 1.0},
        warnings=[],
        prefix_cache_comparison=compare_cache(turn_stats(cold), turn_stats(records))
        if cold
        else None,
    )
    return result.model_dump_json(indent=1)


def _samples_jsonl() -> str:
    from dataclasses import asdict

    from servefit.monitor.nvml import GpuSample

    lines = []
    for i in range(6):
        sample = GpuSample(
            t_s=1.0 + 0.1 * i,
            wall_s=1.7e9 + 0.1 * i,
            gpu=0,
            util_pct=90.0,
            mem_util_pct=60.0,
            mem_used_bytes=70 * 2**30,
            mem_total_bytes=80 * 2**30,
            sm_clock_mhz=1980.0,
            mem_clock_mhz=2619.0,
            power_w=500.0,
            power_limit_w=700.0,
            sm_active_pct=50.0,
        )
        lines.append(json.dumps(asdict(sample)))
    return "".join(line + "\n" for line in lines)


@functools.cache
def bench_folder(layout: str) -> dict[str, str]:
    """A bench run's files as ``servefit bench`` writes them: ``plain`` or ``compare``
    (``--prefix-cache-compare``: cold/ and warm/, the top-level summary the warm run's)."""
    samples = _samples_jsonl()

    def jsonl(records: list[Any]) -> str:
        return "".join(r.model_dump_json() + "\n" for r in records)

    if layout == "plain":
        records = _records(0, 4)
        return {
            "summary.json": _summary_json(records),
            "requests.jsonl": jsonl(records),
            "gpu_samples.jsonl": samples,
        }
    cold, warm = _records(0, 4), _records(4, 4)
    return {
        "summary.json": _summary_json(warm, cold),
        "cold/requests.jsonl": jsonl(cold),
        "cold/summary.json": _summary_json(cold),
        "warm/requests.jsonl": jsonl(warm),
        "warm/summary.json": _summary_json(warm),
        "gpu_samples.jsonl": samples,
    }


@functools.cache
def facts_json() -> str:
    """A recording of a healthy host (2 x H100, driver 580, CUDA 13.0, torch 2.13, vLLM)."""
    from servefit.preflight.facts import (
        DiskFacts,
        EngineFacts,
        GpuFacts,
        GpuProcess,
        HostFacts,
        ModelFacts,
        NvmlFacts,
        TorchFacts,
    )

    total = 85_520_809_984  # nvidia-smi's 81559 MiB of an H100 SXM
    gpus = [
        GpuFacts(
            index=i,
            name="NVIDIA H100 80GB HBM3",
            compute_capability="9.0",
            memory_total_bytes=total,
            memory_free_bytes=total - 2**29,
            memory_used_bytes=2**29,
            processes=[GpuProcess(pid=100 + i, used_bytes=2**28, name="python")],
            mig_enabled=False,
            nvlink_active_links=18,
            pcie_generation=5,
            pcie_width=16,
        )
        for i in range(2)
    ]
    facts = HostFacts(
        servefit_version="fuzz",
        provenance="built by benchmarks/fuzz_artifacts.py",
        nvml=NvmlFacts(driver_version="580.95.05", cuda_driver_version="13.0", gpus=gpus),
        torch=TorchFacts(
            python="python3",
            is_installed=True,
            version="2.13.0+cu130",
            cuda_version="13.0",
            is_cuda_available=True,
            device_count=2,
            arch_list=["sm_80", "sm_90", "compute_90"],
        ),
        engines=[EngineFacts(name="vllm", version="0.33.0", torch_requirement="torch==2.13.0")],
        model=ModelFacts(model=MODEL, origin="catalog"),
        disk=DiskFacts(path_kind="Hugging Face cache", free_bytes=500 * 2**30),
    )
    return facts.model_dump_json(indent=1)


@functools.cache
def calibration_json() -> str:
    """A device calibration of an H100 as ``servefit calibrate`` writes one."""
    from servefit.adapters.catalog import gpu_catalog
    from servefit.calibrate.profile import (
        CalibrationDocument,
        CeilingsSection,
        DatasheetSection,
        DeviceSection,
        PointSection,
        ProfileSection,
        peaks_of,
    )

    gpu = gpu_catalog().get(GPU)
    doc = CalibrationDocument(
        schema_version=1,
        servefit_version="fuzz",
        created_utc="2026-01-01T00:00:00Z",
        command="servefit calibrate",
        model=MODEL,
        dtype="bf16",
        plan="fuzz",
        device=DeviceSection(
            backend="cuda",
            name=gpu.name,
            catalog_gpu=gpu.name,
            compute_capability="9.0",
            memory_bytes=gpu.memory_bytes,
            torch_version="2.13.0",
        ),
        datasheet=DatasheetSection(
            source=gpu.source,
            memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
            peak_flops_per_s=peaks_of(gpu),
        ),
        measured=CeilingsSection(
            read_bandwidth_bytes_per_s=2.9e12,
            copy_bandwidth_bytes_per_s=2.7e12,
            matmul_flops_per_s={"bf16": 7.0e14},
            attention_flops_per_s=4.0e14,
            decode_attention_bytes_per_s=2.5e12,
            projection_flops_per_s={"1": 1e13, "64": 4e14},
            launch_overhead_s=5e-6,
        ),
        points=[
            PointSection(
                label="decode b1",
                kind="decode",
                batch=1,
                tokens=1,
                context=512,
                measured_s=0.004,
                predicted_before_s=0.003,
                predicted_after_s=0.004,
                bound="memory",
                layers_built=2,
                layers_total=28,
            )
        ],
        profile=ProfileSection(
            gemm_efficiency=0.7,
            attention_efficiency=0.5,
            memory_efficiency=0.85,
            step_overhead_s=0.003,
        ),
        median_error_before=0.3,
        median_error_after=0.05,
    )
    return doc.model_dump_json(indent=1)


@functools.cache
def eval_json() -> str:
    """An eval run's ``eval.json`` as ``servefit eval --output`` writes it: two tasks, 7 of 10
    right, one request failed, built through servefit's own types."""
    from servefit.adapters.eval_document import eval_document
    from servefit.bench.evals import EvalConfig, EvalRunResult, ItemRecord

    records = [
        ItemRecord(
            item_id=f"q{i}",
            task="gsm8k" if i < 6 else "mmlu",
            scorer="number" if i < 6 else "choice",
            reference="7" if i < 6 else "B",
            answer="#### 7" if i < 7 else "C",
            correct=i < 7,
            prompt_tokens=40,
            completion_tokens=12,
            latency_s=0.25,
        )
        for i in range(10)
    ]
    records.append(
        ItemRecord(item_id="q10", task="mmlu", scorer="choice", reference="A", error="HTTP 500")
    )
    result = EvalRunResult(model=MODEL, records=tuple(records), not_run=0, interrupted=None)
    cfg = EvalConfig(base_url="http://127.0.0.1:8000")
    return eval_document(result, cfg, ["tasks.jsonl"]).model_dump_json(indent=2)


def vllm_bench_json() -> str:
    """A ``vllm bench serve --save-result --save-detailed`` file, with the keys vLLM 0.32's
    ``vllm/benchmarks/serve.py`` writes (four requests)."""
    import json

    doc = {
        "date": "20261202-101500",
        "backend": "vllm",
        "model_id": MODEL,
        "num_prompts": 4,
        "request_rate": "inf",
        "max_concurrency": 4,
        "duration": 2.5,
        "completed": 4,
        "failed": 0,
        "output_throughput": 51.2,
        "request_throughput": 1.6,
        "mean_ttft_ms": 120.0,
        "median_ttft_ms": 110.0,
        "p99_ttft_ms": 190.0,
        "mean_tpot_ms": 20.0,
        "ttfts": [0.08, 0.1, 0.12, 0.18],
        "generated_texts": ["an answer"] * 4,
    }
    return json.dumps(doc, indent=2)
