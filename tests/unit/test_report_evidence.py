"""The report checks its own evidence (issue 14): a bench that cannot be the planned model on
the planned GPU (another served model, a figure above its physical ceiling) is that finding,
not a diagnosis; remedies only for what the GPU supports; the economics from the measured
throughput when the evidence holds; histograms with whole counts and distinct labels; the
embedded JSON readable by ``JSON.parse``; ``--compare`` columns named by what differs."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from tests.unit.test_report_errors import _bench_dir

from servefit.adapters import svg
from servefit.adapters.catalog import find_gpu
from servefit.adapters.report_compare import column_titles, render_compare_markdown
from servefit.adapters.report_html import render_html
from servefit.core.diagnosis import Observations, Verdict, diagnose, has_fp8_tensor_cores
from servefit.core.evidence import (
    MEASUREMENT_TOLERANCE,
    Evidence,
    check_evidence,
    served_name_matches,
)
from servefit.errors import InvalidArgumentError

LLAMA = "meta-llama/Llama-3.1-8B"


@pytest.mark.parametrize(
    ("served", "alias", "matches"),
    [
        (LLAMA, None, True),  # vLLM serves the HF id by default
        ("META-LLAMA/llama-3.1-8b/", None, True),  # case-blind, trailing slash ignored
        ("/models/Llama-3.1-8B", None, True),  # a local path ending in the model's name
        ("my-llama", "my-llama", True),  # the --served-model-name alias
        ("servefit-null", None, False),  # the null server (the issue's case)
        ("meta-llama/Llama-3.1-8B-Instruct", None, False),  # another checkpoint
        ("my-llama", "other-alias", False),
    ],
)
def test_served_name_rule(served, alias, matches):
    assert served_name_matches(served, LLAMA, alias) is matches


def test_a_local_directory_plan_matches_its_hub_name():
    assert served_name_matches(LLAMA, "/data/Llama-3.1-8B")


def test_the_issues_impossible_figures_are_a_finding_with_the_numbers():
    # the issue's report: 192 % of the bandwidth roofline, 553 % of the compute roofline,
    # from a server that said it serves servefit-null
    (f,) = check_evidence(
        Evidence(
            planned_model=LLAMA,
            gpu="1 x A40",
            served_model="servefit-null",
            decode_bandwidth_fraction=1.92,
            prefill_compute_fraction=5.53,
            output_throughput_tok_per_s=5419.0,
            output_ceiling_tok_per_s=176.0,
        )
    )
    assert f.verdict is Verdict.MISMATCH and f.verdict.value == "not this model on this GPU"
    for words in ("`servefit-null`", LLAMA, "192%", "553%", "5,419", "176 tok/s", "10%"):
        assert words in f.evidence, words
    assert f"not {LLAMA} on 1 x A40" in f.remedy and "--served-model-name" in f.remedy


@pytest.mark.parametrize(
    ("field", "value", "flagged"),
    [
        ("decode_bandwidth_fraction", 1.05, False),  # within the tolerance: noise
        ("decode_bandwidth_fraction", MEASUREMENT_TOLERANCE + 0.01, True),
        ("prefill_compute_fraction", 1.09, False),
        ("prefill_compute_fraction", 1.2, True),
        ("output_throughput_tok_per_s", 1090.0, False),  # ceiling 1000 tok/s below
        ("output_throughput_tok_per_s", 1200.0, True),
    ],
)
def test_each_ceiling_with_its_tolerance(field, value, flagged):
    e = Evidence(planned_model=LLAMA, gpu="1 x H100-SXM", output_ceiling_tok_per_s=1000.0)
    found = check_evidence(replace(e, **{field: value}))
    assert bool(found) is flagged
    if found:  # the name matched (none was said): the remedy is about the GPU and layout
        assert "--gpu and the layout" in found[0].remedy and "alias" not in found[0].remedy


def test_a_matching_name_within_the_ceilings_is_no_finding():
    e = Evidence(
        planned_model=LLAMA,
        gpu="1 x H100-SXM",
        served_model=LLAMA,
        decode_bandwidth_fraction=0.8,
        prefill_compute_fraction=0.4,
        output_throughput_tok_per_s=900.0,
        output_ceiling_tok_per_s=1000.0,
    )
    assert check_evidence(e) == ()
    assert check_evidence(replace(e, served_model=None)) == ()  # nothing said: not checked


def test_no_diagnosis_states_a_percentage_above_100():
    found = diagnose(Observations(decode_bandwidth_fraction=1.05, prefill_compute_fraction=1.08))
    text = " ".join(f.evidence for f in found)
    assert "at the bandwidth roofline" in text and "at the compute roofline" in text
    assert all(int(p) <= 100 for p in re.findall(r"(\d+)%", text)), text


def _remedies(gpu_name: str) -> str:
    o = Observations(decode_bandwidth_fraction=0.8, prefill_compute_fraction=0.6, num_preemptions=3)
    found = diagnose(o, gpu=find_gpu(gpu_name))
    assert {f.verdict for f in found} == {Verdict.CAPACITY, Verdict.BANDWIDTH, Verdict.COMPUTE}
    return " ".join(f.remedy for f in found)


def test_remedies_on_an_a40_offer_no_fp8():
    # A40: compute capability 8.6, no fp8 tensor cores (servefit/data/gpus.toml)
    assert not has_fp8_tensor_cores(find_gpu("A40"))
    text = _remedies("A40")
    # the one fp8 allowed: saying why none is offered
    assert "fp8" not in text.replace("has no fp8 tensor cores", "") and "Hopper" not in text
    assert "int8 or int4" in text and "A40 has no fp8 tensor cores" in text


def test_remedies_on_fp8_gpus_quote_that_gpus_ratio():
    # H100-SXM: 1979 / 989.5 TFLOP/s; L40S (8.9, Ada): 733 / 362 (servefit/data/gpus.toml)
    assert "fp8 (2.0x the 16-bit tensor throughput on H100-SXM)" in _remedies("H100")
    assert "fp8 (2.0x the 16-bit tensor throughput on L40S)" in _remedies("L40S")
    assert "Hopper" not in _remedies("L40S")


def test_histogram_counts_whole_requests_with_distinct_labels():
    # the issue's TPOT histogram: values from 21 to 23 ms labelled 21, 21, 22, 22 ...
    chart = svg.histogram("h", "t", [("measured", [21 + i * 0.1 for i in range(20)])], x_label="ms")
    y_ticks = re.findall(r'text-anchor="end" class="tick">([^<]*)<', chart)  # the counts
    x_ticks = re.findall(r'text-anchor="middle" class="tick">([^<]*)<', chart)
    assert y_ticks and all(t.isdigit() for t in y_ticks)
    assert len(x_ticks) == len(set(x_ticks)) == 6, x_ticks
    assert svg.integer_ticks(7) == [0, 2, 4, 6, 8] and svg.integer_ticks(1) == [0, 1]


def test_histogram_of_two_series_labels_both():
    chart = svg.histogram("h", "t", [("cold", [1.0, 2.0]), ("warm", [0.5, 1.5])], x_label="ms")
    assert re.findall(r'class="legend">([^<]*)<', chart) == ["cold", "warm"]
    assert "<title>cold: 1</title>" in chart and "<title>warm: 1</title>" in chart


# --- through the use case: one planned deployment, a hand-built bench folder ----------


@pytest.fixture(scope="module")
def deployment():
    from servefit.app import Deployment, Hardware, default_workload
    from servefit.core.plan import ServeSettings

    return Deployment(
        model="Qwen/Qwen3-8B",
        hardware=Hardware(gpu="H100"),
        settings=ServeSettings(max_model_len=8192),
        workload=default_workload(
            input_len=100, output_len=8, concurrency=1, request_rate_per_s=None
        ),
        is_workload_given=True,
    )


def _report(deployment, bench, **kw):
    from servefit.app.report import ReportRequest, report_deployment

    return report_deployment(
        deployment, ReportRequest(bench_dir=str(bench), usd_per_gpu_hour=2.0, **kw)
    )


def test_economics_from_the_measured_throughput(deployment, catalog_model, tmp_path):
    catalog_model("Qwen/Qwen3-8B")
    bench = _bench_dir(tmp_path / "bench")  # 4 requests, 100 + 8 tokens, 10 ms TPOT
    doc = _report(deployment, bench, requests_per_task=2, success_rate=0.5)
    assert doc.diagnosis[0].verdict != Verdict.MISMATCH.value
    assert doc.cost is not None and doc.cost_basis is not None
    assert doc.cost_basis.startswith("measured")
    # core/cost.py: $/request = g p / 3600 / r, r the measured requests/s of the bench
    per_request = 2.0 / 3600 / doc.measured.request_throughput_per_s
    assert doc.cost.usd_per_request == pytest.approx(per_request)
    assert doc.cost.usd_per_successful_task == pytest.approx(per_request * 2 / 0.5)
    # the same bench served by another model: not this deployment, priced as predicted
    summary = json.loads((bench / "summary.json").read_text())
    summary["server"]["model"] = "servefit-null"
    (bench / "summary.json").write_text(json.dumps(summary))
    other = _report(deployment, bench)
    (finding,) = other.diagnosis
    assert finding.verdict == Verdict.MISMATCH.value and "`servefit-null`" in finding.evidence
    assert other.cost is not None and other.cost_basis.startswith("predicted")
    assert other.cost.usd_per_request != pytest.approx(per_request)
    aliased = _report(deployment, bench, served_model_name="servefit-null")
    assert aliased.diagnosis[0].verdict != Verdict.MISMATCH.value


def test_task_terms_are_checked_like_cost():
    from servefit.app.report import ReportRequest

    with pytest.raises(InvalidArgumentError, match="--success-rate"):
        ReportRequest(success_rate=0.0)
    with pytest.raises(InvalidArgumentError, match="--requests-per-task"):
        ReportRequest(requests_per_task=0.5)


def test_embedded_json_parses_and_compare_titles_name_the_difference(
    deployment, catalog_model, tmp_path
):
    catalog_model("Qwen/Qwen3-8B")
    from servefit.app.report import ReportRequest, report_deployment

    doc = report_deployment(deployment, ReportRequest(usd_per_gpu_hour=2.0))
    tricky = doc.model_copy(update={"title": 'a "quoted" </script><!-- & title'})
    html = render_html(tricky)
    block = re.search(r'<script type="application/json" id="servefit-report">(.*?)</script>', html)
    assert block is not None
    assert json.loads(block.group(1)) == json.loads(tricky.model_dump_json())
    assert "&quot;" not in block.group(1) and "<" not in block.group(1)

    settings = doc.plan.settings.model_copy(update={"max_num_seqs": 64})
    b = doc.model_copy(update={"plan": doc.plan.model_copy(update={"settings": settings})})
    ta, tb = column_titles(doc, b)
    assert ta == f"max-num-seqs {doc.plan.settings.max_num_seqs}" and tb == "max-num-seqs 64"
    md = render_compare_markdown(doc, b)
    assert f"| max-num-seqs | {doc.plan.settings.max_num_seqs} | 64 |" in md
    assert column_titles(doc, doc) == (f"A: {doc.title}", f"B: {doc.title}")
