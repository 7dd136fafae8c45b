"""Diagnosis rules on recorded GPU sample traces (tests/golden/gpu_traces), each labelled with
the case it represents, joined with the bench's measurements of the same case."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefit.adapters.report import gpu_section, observations
from servefit.core.diagnosis import Expectations, Observations, Verdict, diagnose
from servefit.monitor.nvml import read_samples

TRACES = Path(__file__).parent.parent / "golden" / "gpu_traces"
H200_BANDWIDTH = 4.8e12
H200_BF16 = 989.5e12


def trace(name: str):
    return gpu_section(read_samples(TRACES / f"{name}.jsonl"))


def verdicts(findings) -> set[Verdict]:
    return {f.verdict for f in findings}


def measured(**kw):
    from servefit.adapters.report import MeasuredSection

    base = {
        "source": "test",
        "num_requests": 100,
        "errored": 0,
        "concurrency": 64.0,
        "ttft_s": 0.2,
        "ttft_p99_s": 0.4,
        "tpot_s": 0.02,
        "decode_tok_per_s": 50.0,
        "output_throughput_tok_per_s": 3000.0,
        "request_throughput_per_s": 10.0,
        "ttft_values_s": [],
        "tpot_values_s": [],
        "turn_ttft_s": [],
        "kv_usage_max": 0.5,
        "waiting_max": 0.0,
        "preemptions": 0.0,
    }
    base.update(kw)
    return MeasuredSection(**base)


def test_bandwidth_bound_decode_trace():
    # Llama-3.1-8B at batch 64: a decode step reads ~16 GB of weights + ~40 GB of KV;
    # 56e9 bytes / 20 ms = 2.8 TB/s = 58 % of an H200's 4.8 TB/s
    o = observations(
        measured(),
        trace("decode_bandwidth_bound"),
        decode_bytes_per_step=56e9,
        prefill_flops=None,
        bandwidth_bytes_per_s=H200_BANDWIDTH,
        peak_flops_per_s=H200_BF16,
    )
    found = diagnose(o)
    assert verdicts(found) == {Verdict.BANDWIDTH}
    (f,) = found
    assert "58%" in f.evidence and "add batch" in f.remedy


def test_underutilised_trace():
    o = observations(
        measured(concurrency=1.0),
        trace("underutilised_client_bound"),
        decode_bytes_per_step=16e9,
        prefill_flops=None,
        bandwidth_bytes_per_s=H200_BANDWIDTH,
        peak_flops_per_s=H200_BF16,
    )
    found = diagnose(o)
    assert Verdict.UNDERUTILISED in verdicts(found)
    assert Verdict.BANDWIDTH not in verdicts(found)  # 16 GB / 20 ms is only 17 %


def test_compute_bound_prefill_trace():
    # 32k-token prompts: 2 x 8e9 x 32768 + attention ~ 6.6e14 FLOPs in 1.2 s = 55 % of peak
    o = observations(
        measured(ttft_s=1.2, concurrency=2.0),
        trace("prefill_compute_bound"),
        decode_bytes_per_step=None,
        prefill_flops=6.6e14,
        bandwidth_bytes_per_s=H200_BANDWIDTH,
        peak_flops_per_s=H200_BF16,
    )
    assert verdicts(diagnose(o)) == {Verdict.COMPUTE}


def test_kv_capacity_trace():
    o = observations(
        measured(kv_usage_max=0.99, waiting_max=37.0, preemptions=12.0, concurrency=256.0),
        trace("kv_capacity_bound"),
        decode_bytes_per_step=56e9,
        prefill_flops=None,
        bandwidth_bytes_per_s=H200_BANDWIDTH,
        peak_flops_per_s=H200_BF16,
    )
    found = diagnose(o)
    assert Verdict.CAPACITY in verdicts(found)
    capacity = next(f for f in found if f.verdict is Verdict.CAPACITY)
    assert "12 preemptions" in capacity.evidence and "--max-num-seqs" in capacity.remedy


def test_throttled_trace_explains_a_slow_decode():
    o = observations(
        measured(tpot_s=0.045),
        trace("throttled"),
        decode_bytes_per_step=None,
        prefill_flops=None,
        bandwidth_bytes_per_s=H200_BANDWIDTH,
        peak_flops_per_s=H200_BF16,
    )
    e = Expectations(ttft_s=0.2, tpot_s=0.02, comm_share=0.05, tensor_parallel_size=1)
    slow = next(f for f in diagnose(o, e) if f.verdict is Verdict.SLOWER)
    assert "power" in slow.evidence and "throttling" in slow.remedy


def test_interconnect_from_the_prediction():
    e = Expectations(ttft_s=0.1, tpot_s=0.01, comm_share=0.4, tensor_parallel_size=8)
    assert Verdict.INTERCONNECT in verdicts(diagnose(Observations(), e))


def test_nothing_stands_out():
    assert verdicts(diagnose(Observations(gpu_util_pct=90.0, mem_util_pct=30.0))) == {
        Verdict.AS_PREDICTED
    }


def test_a_half_written_last_sample_is_skipped(tmp_path):
    path = tmp_path / "s.jsonl"
    text = (TRACES / "throttled.jsonl").read_text().splitlines()
    path.write_text("\n".join(text[:3]) + "\n" + text[3][:40])
    assert len(read_samples(path)) == 3


@pytest.mark.parametrize("name", sorted(p.stem for p in TRACES.glob("*.jsonl")))
def test_traces_are_well_formed(name):
    samples = read_samples(TRACES / f"{name}.jsonl")
    assert len(samples) == 150
    assert all(0 <= s.util_pct <= 100 and s.power_w <= s.power_limit_w for s in samples)
