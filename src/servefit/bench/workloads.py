"""What to send: prompts and output lengths, seeded and reproducible.

- ``random``: prompts of an exact number of input tokens (counted with the server's
  ``/tokenize`` when it has one; otherwise the real count comes from usage), fixed output
  length with ``ignore_eos``;
- ``chat`` / ``summarize``: presets of length distributions (chat-like lognormal lengths;
  long inputs and short outputs);
- ``shared-prefix``: groups of requests sharing a prefix of ``prefix_len`` tokens;
- ``agent``: sessions of ``turns`` turns, each prompt = system prompt + the whole history
  (the model's real answers included) + a new message;
- ``jsonl``: prompts (``{"prompt": ...}``) or conversations (``{"messages": [...]}``) from a file;
- ``sharegpt``, ``burstgpt``, ``azure``, ``mooncake``: recorded traffic read from a local file
  (:mod:`servefit.bench.traces`).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from servefit.bench import traces
from servefit.bench.client import Request
from servefit.bench.prompts import (
    TOKENIZE_CONCURRENCY,
    Tokenizer,
    exact_prompt,
    make_request,
    random_words,
)
from servefit.errors import DatasetError, InvalidArgumentError


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadConfig:
    kind: str = "random"  # random, chat, summarize, shared-prefix, agent, jsonl
    num_requests: int = 100
    input_len: int = 256
    output_len: int = 128
    endpoint: str = "completions"  # completions or chat
    ignore_eos: bool = True
    seed: int = 0
    prefix_len: int = 0  # shared-prefix: tokens shared within a group
    num_groups: int = 1
    turns: int = 4  # agent: turns per session
    system_prompt_len: int = 512  # agent: tokens of the shared system prompt
    cache_bust: bool = False  # agent: a unique first token every turn, so no prefix is reused
    message_len: int = 64  # agent: tokens of each new user message
    think_time_s: float = 0.0
    path: str | None = None  # jsonl

    def __post_init__(self) -> None:
        for name in ("num_requests", "input_len", "output_len", "turns", "num_groups"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"--{name.replace('_', '-')} must be at least 1")
        if self.kind not in KINDS:
            raise InvalidArgumentError(
                f"--workload must be one of {', '.join(KINDS)}, got {self.kind!r}"
            )
        if self.endpoint not in ("completions", "chat"):
            raise InvalidArgumentError("--endpoint must be completions or chat")
        if self.kind in FILE_KINDS and not self.path:
            raise InvalidArgumentError(f"--workload {self.kind} needs --dataset FILE")
        if self.prefix_len >= self.input_len and self.kind == "shared-prefix":
            raise InvalidArgumentError("--prefix-len must be smaller than --input-len")


FILE_KINDS = ("jsonl", *traces.FORMATS)
KINDS = ("random", "chat", "summarize", "shared-prefix", "agent", *FILE_KINDS)
# the workloads whose lines carry arrival times (--replay sends them then)
TIMED_KINDS = ("jsonl", "burstgpt", "azure", "mooncake")


def _lognormal_length(
    rng: random.Random, mean: float, sigma: float = 0.8, cap: int = 32_768
) -> int:
    mu = math.log(mean) - sigma**2 / 2
    return max(1, min(cap, int(rng.lognormvariate(mu, sigma))))


async def build_requests(cfg: WorkloadConfig, count: Tokenizer | None) -> list[Request]:
    """Every request of a flat workload (not agent sessions), in order."""
    rng = random.Random(cfg.seed)
    if cfg.kind == "jsonl":
        return _from_jsonl(cfg)
    if cfg.kind in traces.FORMATS:
        return await traces.trace_requests(
            cfg.kind,
            cfg.path or "",
            num_requests=cfg.num_requests,
            seed=cfg.seed,
            endpoint=cfg.endpoint,
            ignore_eos=cfg.ignore_eos,
            count=count,
        )
    prefixes = []
    if cfg.kind == "shared-prefix":
        for _ in range(cfg.num_groups):
            prefixes.append((await exact_prompt(rng, cfg.prefix_len, count))[0])
    # Lengths and words are drawn in order from the seeded generator (reproducible); only the
    # server round trips that refine exact lengths run concurrently.
    plans = []
    for i in range(cfg.num_requests):
        if cfg.kind == "chat":
            input_len = _lognormal_length(rng, cfg.input_len)
            output_len = _lognormal_length(rng, cfg.output_len)
        else:
            input_len, output_len = cfg.input_len, cfg.output_len
        plans.append((i, input_len, output_len, random.Random(rng.random())))
    limit = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

    async def one(i: int, input_len: int, output_len: int, own: random.Random) -> Request:
        if prefixes:
            suffix, _ = await exact_prompt(own, input_len - cfg.prefix_len, None)
            return _request(
                cfg, i, prefixes[i % len(prefixes)] + " " + suffix, output_len, input_len
            )
        async with limit:
            text, planned = await exact_prompt(own, input_len, count)
        return _request(cfg, i, text, output_len, planned)

    return list(await asyncio.gather(*(one(*plan) for plan in plans)))


def _request(
    cfg: WorkloadConfig, i: int, text: str, output_len: int, planned: int | None
) -> Request:
    return make_request(cfg.endpoint, cfg.ignore_eos, i, text, output_len, planned)


def _from_jsonl(cfg: WorkloadConfig) -> list[Request]:
    """One request per line: ``{"prompt": ...}`` or ``{"messages": [...]}``, optional
    ``max_tokens`` and ``timestamp_s`` (seconds from the start, for trace replay)."""
    path = Path(cfg.path or "")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"--dataset {path}: cannot be read ({exc.strerror})") from None
    requests: list[Request] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            raise DatasetError(f"--dataset {path}, line {number}: not JSON") from None
        if not isinstance(item, dict) or not ("messages" in item or "prompt" in item):
            raise DatasetError(f"--dataset {path}, line {number}: needs 'prompt' or 'messages'")
        try:
            max_tokens = int(item.get("max_tokens", cfg.output_len))
            arrival = float(item["timestamp_s"]) if "timestamp_s" in item else None
        except (TypeError, ValueError):
            raise DatasetError(
                f"--dataset {path}, line {number}: max_tokens and timestamp_s must be numbers"
            ) from None
        if "messages" in item:
            endpoint, prompt, messages = "chat", None, item["messages"]
        elif cfg.endpoint == "chat":
            endpoint, prompt = "chat", None
            messages = [{"role": "user", "content": str(item["prompt"])}]
        else:
            endpoint, prompt, messages = "completions", str(item["prompt"]), None
        requests.append(
            Request(
                request_id=len(requests),
                endpoint=endpoint,
                prompt=prompt,
                messages=messages,
                max_tokens=max_tokens,
                ignore_eos=cfg.ignore_eos,
                arrival_s=arrival,
            )
        )
        if len(requests) >= cfg.num_requests:
            break
    if not requests:
        raise DatasetError(f"--dataset {path} holds no request")
    return requests


@dataclass(slots=True)
class AgentSession:
    """One agent: its prompt is the system prompt plus the whole history, every turn."""

    session_id: int
    system_prompt: str
    messages_text: list[str]  # the new user message of each turn, prepared up front
    output_len: int
    ignore_eos: bool
    history: list[dict[str, str]]

    cache_bust: bool = False

    def request(self, turn: int, request_id: int) -> Request:
        self.history.append({"role": "user", "content": self.messages_text[turn]})
        system = self.system_prompt
        if self.cache_bust:  # a different first token: the cache cannot match any block
            system = f"[nonce {self.session_id}-{turn}-{request_id}] {system}"
        messages = [{"role": "system", "content": system}, *self.history]
        return Request(
            request_id=request_id,
            endpoint="chat",
            messages=list(messages),
            max_tokens=self.output_len,
            ignore_eos=self.ignore_eos,
            session_id=self.session_id,
            turn=turn,
        )

    def answer(self, text: str) -> None:
        self.history.append({"role": "assistant", "content": text})


async def build_sessions(
    cfg: WorkloadConfig, count: Tokenizer | None, num_sessions: int
) -> list[AgentSession]:
    rng = random.Random(cfg.seed)
    system, _ = await exact_prompt(rng, cfg.system_prompt_len, count)
    sessions = []
    for s in range(num_sessions):
        # a per-session tag keeps sessions from sharing more than the system prompt
        messages = [
            f"[session {s} turn {t}] " + random_words(rng, cfg.message_len)
            for t in range(cfg.turns)
        ]
        sessions.append(
            AgentSession(
                session_id=s,
                system_prompt=system,
                messages_text=messages,
                output_len=cfg.output_len,
                ignore_eos=cfg.ignore_eos,
                history=[],
                cache_bust=cfg.cache_bust,
            )
        )
    return sessions
