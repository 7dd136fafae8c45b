"""The flags of ``servefit bench``: the server, the workload, the load (one level or a
sweep), the limits and the output, named as ``vllm bench serve`` names them where it has
them. :mod:`servefit.bench.config` validates their values."""

from __future__ import annotations

from typing import Any

import click

from servefit.cli.types import FINITE_FLOAT, NON_NEGATIVE_FLOAT, POSITIVE_FLOAT

WORKLOADS = [
    "random",
    "chat",
    "summarize",
    "shared-prefix",
    "agent",
    "jsonl",
    "sharegpt",
    "burstgpt",
    "azure",
    "mooncake",
]
_opt = click.option
BENCH_OPTIONS = [
    _opt("--replica", "replicas", multiple=True, help="Another base URL of the same model."),
    _opt("--session-affinity", is_flag=True, help="Send a session's turns to one replica."),
    _opt("--model", "model_name", help="Model name to request [the first of /v1/models]."),
    _opt(
        "--endpoint",
        type=click.Choice(["completions", "chat"]),
        default="completions",
        show_default=True,
    ),
    _opt(
        "--api-key-env",
        default="OPENAI_API_KEY",
        show_default=True,
        help="Environment variable holding the API key (the key itself is never written).",
    ),
    _opt("--workload", type=click.Choice(WORKLOADS), default="random", show_default=True),
    _opt(
        "--input-len", type=int, default=256, show_default=True, help="Prompt tokens (chat: mean)."
    ),
    _opt(
        "--output-len", type=int, default=128, show_default=True, help="Output tokens (chat: mean)."
    ),
    _opt(
        "--num-requests",
        type=int,
        default=100,
        show_default=True,
        help="Requests (agent: sessions).",
    ),
    _opt(
        "--concurrency",
        help="Closed loop: requests in flight (with a rate: the cap). 1,4,16 or 1:64:x2 sweeps.",
    ),
    _opt(
        "--request-rate",
        help="Open loop: mean arrivals per second. A list or a range (1:16:x2, 2:10:+2) sweeps.",
    ),
    _opt("--search-slo", is_flag=True, help="Find the highest concurrency meeting the SLOs."),
    _opt(
        "--slo-percentile",
        type=click.IntRange(1, 99),
        default=90,
        show_default=True,
        help="Percentile the SLO limits apply to (--search-slo).",
    ),
    _opt(
        "--burstiness",
        type=POSITIVE_FLOAT,
        default=1.0,
        show_default=True,
        help="1: Poisson; <1 burstier.",
    ),
    _opt(
        "--ramp-to",
        type=POSITIVE_FLOAT,
        help="A linear ramp of the arrival rate from --request-rate to this (req/s) ...",
    ),
    _opt(
        "--ramp-duration-s",
        type=POSITIVE_FLOAT,
        help="... over this many seconds, then steady at --ramp-to.",
    ),
    _opt("--prefix-len", type=int, default=0, help="shared-prefix: tokens shared in a group."),
    _opt("--num-groups", type=int, default=1, help="shared-prefix: number of groups."),
    _opt("--turns", type=int, default=4, show_default=True, help="agent: turns per session."),
    _opt("--system-prompt-len", type=int, default=512, show_default=True, help="agent: tokens."),
    _opt("--message-len", type=int, default=64, show_default=True, help="agent: new tokens/turn."),
    _opt(
        "--think-time-s", type=NON_NEGATIVE_FLOAT, default=0.0, help="agent: pause between turns."
    ),
    _opt(
        "--prefix-cache-compare",
        is_flag=True,
        help="agent: cache-busted (cold), then warm; the TTFT saved per turn.",
    ),
    _opt(
        "--dataset",
        help="The workload's local file: jsonl (prompts or conversations, a JSON object a "
        "line), sharegpt (vLLM bench's ShareGPT JSON), burstgpt or azure (trace CSV), "
        "mooncake (trace JSONL with hash_ids).",
    ),
    _opt(
        "--replay",
        is_flag=True,
        help="Send each request at its recorded time (jsonl timestamp_s, burstgpt, azure, "
        "mooncake).",
    ),
    _opt(
        "--time-scale",
        type=POSITIVE_FLOAT,
        default=1.0,
        show_default=True,
        help="Replay: 0.5 = 2x.",
    ),
    _opt(
        "--ignore-eos/--no-ignore-eos",
        default=True,
        show_default=True,
        help="Ask for exactly --output-len tokens (vLLM/SGLang extension).",
    ),
    _opt("--plan-model", help="Also plan this model and print predicted vs measured."),
    _opt("--gpu", "plan_gpu", help="With --plan-model: the server's GPU (catalog name)."),
    _opt("--plan-tp", type=int, default=1, show_default=True, help="With --plan-model: TP."),
    _opt("--tokenizer", "tokenizer_path", help="A local tokenizer.json to size prompts with."),
    _opt(
        "--workers",
        type=click.IntRange(1, 256),
        default=1,
        show_default=True,
        help="Client processes (for rates one core cannot drive).",
    ),
    _opt("--seed", type=int, default=0, show_default=True),
    _opt(
        "--repeat",
        type=click.IntRange(1, 100),
        default=1,
        show_default=True,
        help="Run N times (the same requests): every headline figure with a bootstrap "
        "interval over the runs (OUTPUT/repeat-K, repeats.json).",
    ),
    _opt("--warmup", type=int, default=0, help="Warm-up requests, excluded from the metrics."),
    _opt("--duration-s", type=FINITE_FLOAT, help="Stop sending after this long."),
    _opt(
        "--timeout-s",
        type=FINITE_FLOAT,
        default=600.0,
        show_default=True,
        help="Read timeout: seconds without data before a request fails (> 0).",
    ),
    _opt(
        "--max-error-rate",
        type=FINITE_FLOAT,
        default=0.0,
        show_default=True,
        help="Fraction of requests (0-1) that may fail (errored or cut) before the run exits 1.",
    ),
    _opt(
        "--lora-modules",
        multiple=True,
        metavar="NAME[,NAME...]",
        help="LoRA adapters the server serves (vllm serve --lora-modules): requests ask for "
        "them in turn by name.",
    ),
    _opt("--slo-ttft-ms", type=FINITE_FLOAT, help="Goodput: TTFT limit in ms."),
    _opt("--slo-tpot-ms", type=FINITE_FLOAT, help="Goodput: time-per-output-token limit in ms."),
    _opt("--slo-e2el-ms", type=FINITE_FLOAT, help="Goodput: end-to-end latency limit in ms."),
    _opt(
        "--goodput",
        multiple=True,
        help='vLLM\'s spelling: "ttft:500 tpot:50 e2el:9000" (ms; quote it, or repeat).',
    ),
    _opt(
        "--output",
        "output_dir",
        type=click.Path(file_okay=False),
        help="Write requests.jsonl and summary.json (sweep.json) here.",
    ),
    _opt("--monitor", is_flag=True, help="Sample local NVIDIA GPUs into OUTPUT/gpu_samples.jsonl."),
    _opt(
        "--otlp",
        metavar="URL|FILE",
        help="Export a span per request: OTLP/HTTP to a collector URL, or OTLP/JSON lines to "
        "a file (pip install 'servefit[otel]').",
    ),
    _opt("--json", "as_json", is_flag=True, help="Print the summary document."),
]


def bench_options(command: Any) -> Any:
    """Every ``servefit bench`` flag, in the order ``--help`` lists them."""
    for option in reversed(BENCH_OPTIONS):
        command = option(command)
    return command
