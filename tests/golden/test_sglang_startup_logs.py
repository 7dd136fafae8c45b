"""SGLang's KV pool (``max_total_num_tokens``) against public SGLang start-up logs (issue 32).

Given the memory a log prints (free before loading, free after: SGLang's "Load weight begin /
end ... avail mem" lines, in GiB though printed "GB"), servefit's pool rule
(``sglang.pool_tokens``, SGLang's ``profile_max_num_token``) and servefit's KV bytes per
token of the model at that TP must give the logged token count, to the rounding of the
two-decimal figures. The logs' ``mem_fraction_static`` is the release's default, which
``default_mem_fraction_static`` must also give. End to end (servefit's own weights and free
memory) the plans are checked too, with each log's known gap written out.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.core.engines.sglang import default_mem_fraction_static, pool_tokens

GIB = 2**30
GB_ROUNDING = 0.005 * GIB  # the logs print memory to 2 decimals

# (source, argv of the deployment, release, avail mem before / after loading (GiB),
#  mem_fraction_static as printed in server_args, logged max_total_num_tokens)
LOGS = [
    (
        # "Load weight begin. avail mem=78.81 GB" / "Load weight end. type=LlamaForCausalLM,
        # dtype=torch.bfloat16, avail mem=63.72 GB" / "max_total_num_tokens=444500, ...
        # context_len=131072"; the docs' own run on an 80 GB card, mem_fraction_static=0.88
        "docs.sglang.ai start/send_request.html (build of 2025-01-23)",
        ["meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"],
        "0.4.2",
        78.81,
        63.72,
        0.88,
        444_500,
    ),
    (
        # 4 x L4 (EC2 g6.12xlarge), sglang 0.4.3.post4, TP 4: "avail mem=21.63 GB" /
        # "avail mem=6.09 GB, mem usage=15.54 GB." / "KV Cache is allocated. #tokens: 46611"
        "github.com/didier-durand/llms-in-clouds docs/sglang.md (QwQ-32B start sequence)",
        ["Qwen/QwQ-32B", "--gpu", "L4", "--tp", "4"],
        "0.4.3",
        21.63,
        6.09,
        0.85,
        46_611,
    ),
    (
        # RTX 3090, lmsysorg/sglang:latest of 2025-02-04: "avail mem=22.76 GB" / "avail
        # mem=8.37 GB" / "max_total_num_tokens=105531"
        "github.com/jerryzsj/my-deepseek-r1 README.md",
        ["deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "--gpu", "RTX-3090"],
        "0.4.2",
        22.76,
        8.37,
        0.88,
        105_531,
    ),
]


def _plan(argv, release):
    result = CliRunner().invoke(
        cli,
        [
            *("plan", *argv, "--sglang-version", release),
            *("--context-length", "8192", "--offline", "--json"),
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize(("source", "argv", "release", "before", "after", "mfs", "logged"), LOGS)
def test_the_pool_given_the_logged_memory_is_the_logged_token_count(
    source, argv, release, before, after, mfs, logged
):
    doc = _plan(argv, release)
    per_token = doc["memory"]["kv_bytes_per_token"]
    weights = (before - after) * GIB  # what loading took, as the log measures it
    predicted = pool_tokens(before * GIB, weights, mfs, per_token)
    # the two figures' rounding moves the pool by up to (1 + (1 - mfs)) x 0.005 GiB
    slack = (2 - mfs) * GB_ROUNDING / per_token
    assert abs(predicted - logged) <= slack + 1, (source, predicted, logged)


@pytest.mark.parametrize(("source", "argv", "release", "before", "after", "mfs", "logged"), LOGS)
def test_the_releases_default_fraction_is_the_logged_one(
    source, argv, release, before, after, mfs, logged
):
    doc = _plan(argv, release)
    assert doc["settings"]["gpu_memory_utilization"] == pytest.approx(mfs), source


def test_kv_bytes_per_token_at_tp4_are_one_ranks_heads():
    # QwQ-32B: 64 layers x 2 (K, V) x 8 KV heads / TP 4 x 128 dims x 2 bytes = 65,536
    doc = _plan(["Qwen/QwQ-32B", "--gpu", "L4", "--tp", "4"], "0.4.3")
    assert doc["memory"]["kv_bytes_per_token"] == 64 * 2 * 2 * 128 * 2


def test_end_to_end_the_h100_log_is_within_one_percent():
    # on a clean 80 GB card servefit's weights and free memory are the log's to 0.1 GiB
    doc = _plan(["meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"], "0.4.2")
    assert doc["memory"]["kv_cache_tokens"] == pytest.approx(444_500, rel=0.01)


def test_later_releases_size_the_default_by_the_gpus_memory():
    mib = 2**20
    # 0.4.9 to 0.5.2 keep 2.8 + TP x PP / 10 GiB on a card below 35 GiB: an RTX 4090's
    # 24,564 MiB -> round((24,564 - 2.9 x 1,024) / 24,564, 3) = 0.879
    assert default_mem_fraction_static(24_564 * mib, 1, 1, "0.5.2") == 0.879
    # 0.4.6 keeps 13 GiB on a card above 80 GiB (an H200's 143,771 MiB); TP's table below
    h200 = 143_771 * mib
    assert default_mem_fraction_static(h200, 1, 1, "0.4.6") == (h200 - 13 * GIB) / h200
    assert default_mem_fraction_static(80 * GIB, 8, 1, "0.4.6") == 0.81
    assert default_mem_fraction_static(80 * GIB, 8, 1, "0.3.6") == 0.82
