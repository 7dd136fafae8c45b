"""The Prometheus text format through prometheus_client's parser: label values that hold
braces, commas and escaped quotes (which broke the old regex), and a line it refuses
skipped while the rest is kept."""

from __future__ import annotations

from pathlib import Path

from servefit.bench.server_metrics import (
    GAUGES,
    gauge_lines,
    normalise,
    parse_gauges,
    parse_histograms,
    parse_prometheus,
)

TEXT = "\n".join(
    [
        "# HELP vllm:num_requests_running Requests on the GPU.",
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{model_name="a}b",engine="0"} 3',
        'vllm:num_requests_running{model_name="say \\"hi\\", {now}",engine="1"} 2',
        "# TYPE vllm:generation_tokens_total counter",
        'vllm:generation_tokens_total{model_name="x\\\\y\\nz"} 7',
        "# TYPE vllm:time_to_first_token_seconds histogram",
        'vllm:time_to_first_token_seconds_bucket{model_name="{m}",le="0.1"} 2',
        'vllm:time_to_first_token_seconds_bucket{model_name="{m}",le="+Inf"} 5',
        'vllm:time_to_first_token_seconds_count{model_name="{m}"} 5',
        'vllm:time_to_first_token_seconds_sum{model_name="{m}"} 1.5',
        "vllm:kv_cache_usage_perc NaN",
    ]
)


def test_label_values_with_braces_escapes_and_commas():
    raw = parse_prometheus(TEXT + "\n")
    assert raw["vllm:num_requests_running"] == 5  # both label sets, summed
    assert raw["vllm:generation_tokens_total"] == 7
    assert raw["vllm:time_to_first_token_seconds_count"] == 5
    assert "vllm:kv_cache_usage_perc" not in raw  # NaN is no value
    assert normalise(raw)["requests_running"] == 5
    assert parse_histograms(TEXT + "\n") == {
        "vllm:time_to_first_token_seconds": {0.1: 2.0, float("inf"): 5.0}
    }


def test_a_line_the_parser_refuses_is_skipped_the_rest_kept():
    head = "# TYPE vllm:generation"
    broken = TEXT.replace(head, "this is { not a sample\n" + head)
    raw = parse_prometheus(broken + "\n")
    assert raw["vllm:num_requests_running"] == 5
    assert raw["vllm:generation_tokens_total"] == 7
    assert parse_histograms(broken)["vllm:time_to_first_token_seconds"][0.1] == 2.0
    assert parse_prometheus("") == {} and parse_prometheus("garbage {{{") == {}


# vLLM 0.32.0's own /metrics (CPU build, the tiny Llama of tests/integration, three
# completions served): 629 lines, 18 histograms, 50 gauges. Captured from that server.
VLLM_METRICS = (Path(__file__).parent / "data" / "vllm_0.32_cpu_metrics.txt").read_text()


def _busy(text: str) -> str:
    """The captured text with the gauges a loaded server would show (its run was idle)."""
    labels = '{engine="0",model_name="tiny-llama"}'
    for name, value in (
        ("vllm:num_requests_running", "7.0"),
        ("vllm:num_requests_waiting", "2.0"),
        ("vllm:kv_cache_usage_perc", "0.25"),
    ):
        idle = f"{name}{labels} 0.0\n"
        assert idle in text
        text = text.replace(idle, f"{name}{labels} {value}\n")
    return text


def test_sampled_gauges_are_the_full_parses():
    text = _busy(VLLM_METRICS)
    everything = normalise(parse_prometheus(text))
    assert parse_gauges(text) == {name: everything[name] for name in GAUGES}
    assert parse_gauges(text) == {
        "requests_running": 7.0,
        "requests_waiting": 2.0,
        "kv_cache_usage": 0.25,
    }


def test_a_sample_during_the_run_parses_only_the_gauges_lines():
    kept = gauge_lines(VLLM_METRICS).splitlines()
    samples = [line for line in kept if not line.startswith("#")]
    # one sample each of the three gauges vLLM 0.32 exports, with their TYPE and HELP lines;
    # none of the 600-odd other lines (histogram buckets, the waiting-by-reason gauge whose
    # name starts like one of them)
    assert [line.split("{")[0] for line in samples] == [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ]
    assert len(kept) == 9
    assert len(VLLM_METRICS.splitlines()) == 629


def test_gauge_lines_keep_labels_with_braces_and_spaces():
    text = TEXT + '\nvllm:num_requests_running_total{model_name="x"} 99\n'
    assert parse_gauges(text) == {"requests_running": 5.0}  # the two label sets; NaN left out
    assert gauge_lines("sglang:num_running_reqs 4\nother 1\n") == "sglang:num_running_reqs 4\n"
    assert parse_gauges("") == {}
