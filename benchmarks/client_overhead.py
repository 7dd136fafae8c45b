"""Client overhead: how many requests per second the benchmark client itself can drive.

Run: python benchmarks/client_overhead.py [--requests 4000] [--concurrency 256] [--rounds 9]
         [--peers-venv DIR]   (a throwaway venv with aiperf and/or guidellm installed)

Starts `servefit null-server` (instant answers, 16 tokens) in its own process, then drives it
at the same concurrency with: a bare asyncio + aiohttp loop (the ceiling of a Python client),
servefit bench, and, when --peers-venv has them, aiperf and guidellm (both need --tokenizer,
a local tokenizer directory, to run offline). Prints a table.

With --rounds N the bare loop and servefit bench take turns N times (the order alternating,
so a machine getting busier or quieter favours neither) and each round's ratio is printed,
then their median and spread: on a shared machine a ratio measured within one round is the
number to trust, not either side's requests/s.
Targets (issue #3, #14): servefit >= 3x aiperf's requests/s and >= 90 % of the bare loop
(median of 9 rounds); p99 client lag <= 1 ms at moderate load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

PROMPT = " ".join(["word"] * 64)
OUTPUT_TOKENS = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servefit.cli.main",
            "null-server",
            "--port",
            str(port),
            "--output-len",
            str(OUTPUT_TOKENS),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("null server did not start")


def run_on_bench_loop(coro: Any) -> Any:
    """Run ``coro`` on the event loop servefit bench runs on (uvloop where installed), so
    the ratio compares the clients, not two event loops."""
    loop_factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)


async def bare_loop(url: str, requests: int, concurrency: int) -> float:
    """The least a Python client can do: post, read the stream by block (as servefit bench
    and vLLM's bench client read it) until [DONE], repeat."""
    import aiohttp

    body = {
        "model": "servefit-null",
        "prompt": PROMPT,
        "max_tokens": OUTPUT_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    remaining = iter(range(requests))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker() -> None:
            for _ in remaining:
                async with session.post(url + "/v1/completions", json=body) as resp:
                    tail = b""
                    async for block in resp.content.iter_any():
                        tail = (tail + block)[-32:]  # [DONE] may span two blocks
                        if b"data: [DONE]" in tail:
                            break

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return requests / (time.perf_counter() - start)


def servefit_summary(url: str, *load: str) -> dict:
    """`servefit bench --json` at the given load flags; its summary document."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "servefit.cli.main",
            "bench",
            url,
            "--workload",
            "random",
            "--input-len",
            "64",
            "--output-len",
            str(OUTPUT_TOKENS),
            *load,
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)["summary"]


def servefit(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    s = servefit_summary(url, "--concurrency", str(concurrency), "--num-requests", str(requests))
    return s["request_throughput_per_s"], s["client_lag_s"]["p99"]


def moderate_load_lag(url: str) -> float:
    s = servefit_summary(url, "--request-rate", "200", "--num-requests", "1000")
    return s["client_lag_s"]["p99"]


def aiperf(
    venv: Path, url: str, requests: int, concurrency: int, workdir: Path, tokenizer: Path | None
) -> float | None:
    binary = venv / "bin" / "aiperf"
    if not binary.exists():
        return None
    out = workdir / "aiperf"
    done = subprocess.run(
        [
            str(binary),
            "profile",
            "--model",
            "servefit-null",
            "--url",
            url,
            "--endpoint-type",
            "completions",
            "--streaming",
            "--concurrency",
            str(concurrency),
            "--request-count",
            str(requests),
            "--synthetic-input-tokens-mean",
            "64",
            "--output-tokens-mean",
            str(OUTPUT_TOKENS),
            "--artifact-dir",
            str(out),
            *(["--tokenizer", str(tokenizer)] if tokenizer else []),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    for path in out.rglob("*aiperf*.json"):
        data = json.loads(path.read_text())
        throughput = data.get("request_throughput") or {}
        if isinstance(throughput, dict) and "avg" in throughput:
            return float(throughput["avg"])
    print("aiperf did not produce a result:", done.stderr[-400:], file=sys.stderr)
    return None


def guidellm(
    venv: Path, url: str, requests: int, concurrency: int, workdir: Path, tokenizer: Path | None
) -> float | None:
    """guidellm 0.8: its tokenizer comes from the backend's model name, so the model is the
    local tokenizer directory (the null server answers whatever model is asked for)."""
    binary = venv / "bin" / "guidellm"
    if not binary.exists() or tokenizer is None:
        return None
    out = workdir / "guidellm.json"
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [
            str(binary),
            "run",
            "--backend",
            f"kind=openai_http,target={url},model={tokenizer}",
            "--profile",
            f"kind=concurrent,streams={concurrency}",
            "--constraint",
            f"kind=max_requests,count={requests}",
            "--data",
            f"kind=synthetic_text,prompt_tokens=64,output_tokens={OUTPUT_TOKENS}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console-interactive",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if not out.exists():
        print(
            "guidellm did not produce a result:",
            done.stdout[-400:],
            done.stderr[-400:],
            file=sys.stderr,
        )
        return None
    bench = json.loads(out.read_text())["benchmarks"][0]
    successful = bench["metrics"]["requests_per_second"]["successful"]["count"]
    return successful / bench["duration"]


def rounds(
    url: str, requests: int, concurrency: int, count: int
) -> list[tuple[float, float, float]]:
    """``count`` rounds of (bare loop, servefit) requests/s and servefit's p99 client lag,
    alternating which client goes first."""
    out = []
    for i in range(count):
        if i % 2:
            ours, lag = servefit(url, requests, concurrency)
            bare = run_on_bench_loop(bare_loop(url, requests, concurrency))
        else:
            bare = run_on_bench_loop(bare_loop(url, requests, concurrency))
            ours, lag = servefit(url, requests, concurrency)
        out.append((bare, ours, lag))
        if count > 1:
            print(
                f"round {i + 1}: bare {bare:,.0f}/s, servefit {ours:,.0f}/s, {ours / bare:.2f}x",
                file=sys.stderr,
                flush=True,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument(
        "--rounds", type=int, default=1, help="Bare loop vs servefit, this many times."
    )
    parser.add_argument("--peers-venv", type=Path)
    parser.add_argument(
        "--tokenizer", type=Path, help="A local tokenizer directory for aiperf (offline)."
    )
    args = parser.parse_args()
    server, url = start_server()
    try:
        measured = rounds(url, args.requests, args.concurrency, args.rounds)
        moderate_lag = [moderate_load_lag(url) for _ in range(args.rounds)]
        peer = (
            aiperf(
                args.peers_venv, url, args.requests, args.concurrency, Path("/tmp"), args.tokenizer
            )
            if args.peers_venv
            else None
        )
        other = (
            guidellm(
                args.peers_venv, url, args.requests, args.concurrency, Path("/tmp"), args.tokenizer
            )
            if args.peers_venv
            else None
        )
    finally:
        server.kill()
    ratios = [ours / bare for bare, ours, _ in measured]
    bare = statistics.median(b for b, _, _ in measured)
    ours = statistics.median(o for _, o, _ in measured)
    lag = statistics.median(v for _, _, v in measured)
    print(
        f"\nclient overhead: {args.requests} requests at concurrency {args.concurrency}, "
        f"instant null server, {OUTPUT_TOKENS} tokens each"
        + (f", median of {args.rounds} rounds" if args.rounds > 1 else "")
        + "\n"
    )
    print(f"{'client':32s} {'requests/s':>12s} {'vs bare loop':>14s}")
    print(f"{'bare asyncio + aiohttp loop':32s} {bare:12,.0f} {'100%':>14s}")
    print(f"{'servefit bench':32s} {ours:12,.0f} {statistics.median(ratios):14.0%}")
    if args.rounds > 1:
        print(
            f"servefit / bare loop per round: median {statistics.median(ratios):.2f}x, "
            f"{min(ratios):.2f}x to {max(ratios):.2f}x (target >= 0.90x)"
        )
    if peer is not None:
        print(f"{'aiperf':32s} {peer:12,.0f} {peer / bare:14.0%}")
        print(f"servefit / aiperf: {ours / peer:.1f}x (target >= 3x)")
    if other is not None:
        print(f"{'guidellm':32s} {other:12,.0f} {other / bare:14.0%}")
        if peer is not None:
            print(f"servefit / guidellm: {ours / other:.1f}x")
    lags = ", ".join(f"{v * 1000:.2f}" for v in sorted(moderate_lag))
    print(
        f"servefit p99 client lag at c={args.concurrency}: {lag * 1000:.2f} ms; "
        f"at 200 req/s open loop: {statistics.median(moderate_lag) * 1000:.2f} ms "
        f"(target <= 1 ms)" + (f" [{lags} ms]" if args.rounds > 1 else "")
    )


if __name__ == "__main__":
    main()
