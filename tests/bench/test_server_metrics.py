"""The Prometheus text format through prometheus_client's parser: label values that hold
braces, commas and escaped quotes (which broke the old regex), and a line it refuses
skipped while the rest is kept."""

from __future__ import annotations

from servefit.bench.server_metrics import normalise, parse_histograms, parse_prometheus

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
