"""Recorded traffic as bench's requests: ShareGPT conversations, BurstGPT, the Azure LLM
inference traces and Mooncake traces, read from local files (never fetched).

Each reader gives :class:`TraceItem` values in the file's order, then :func:`take` samples
them (seeded) and :func:`trace_requests` turns them into requests:

* **ShareGPT** (``[{"conversations": [{"from": "human", "value": ...}, {"from": "gpt",
  ...}]}, ...]``, the JSON vLLM's ``benchmark_serving --dataset-name sharegpt`` reads): the
  first human turn is the prompt and the reply that follows it sets the output length, as
  vLLM's ``ShareGPTDataset`` does; like it, pairs with a prompt or a reply under 4 tokens,
  a prompt over 1024 or both over 2048 are skipped, and the order is shuffled with the seed;
* **BurstGPT** (CSV: ``Timestamp, Model, Request tokens, Response tokens, ...``): lengths and
  arrival times; a row with no response tokens (a failed request) is skipped;
* **Azure** (CSV: ``TIMESTAMP, ContextTokens, GeneratedTokens``, the Azure LLM inference
  traces of 2023/2024): lengths and arrival times;
* **Mooncake** (JSONL: ``timestamp`` in ms, ``input_length``, ``output_length``,
  ``hash_ids``): lengths, arrival times, and which 512-token blocks of the prompt two
  requests share. A block of a given hash id is the same text in every request, so a
  prefix cache sees the reuse the trace recorded.

Where a trace has lengths and no text, the prompt is made of exactly that many tokens as the
server counts them (:func:`servefit.bench.prompts.exact_prompt`). A malformed line is an
error naming the file, the line and what is wrong; nothing is sent.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from servefit.bench.client import Request
from servefit.bench.prompts import (
    TOKENIZE_CONCURRENCY,
    WORDS,
    Tokenizer,
    exact_prompt,
    make_request,
)
from servefit.errors import DatasetError

FORMATS = ("sharegpt", "burstgpt", "azure", "mooncake")
MOONCAKE_BLOCK_TOKENS = 512  # the trace's hash_ids are blocks of 512 tokens (Mooncake's README)
# vLLM's ShareGPT filter (benchmark_dataset.py is_valid_sequence): the shortest prompt and
# reply, the longest prompt, the longest pair, in tokens
SHAREGPT_MIN_TOKENS = 4
SHAREGPT_MAX_PROMPT_TOKENS = 1024
SHAREGPT_MAX_TOTAL_TOKENS = 2048
MAX_TRACE_BYTES = 2 * 1024**3  # a local file larger than this is refused, not read whole


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceItem:
    """One recorded request: its text (ShareGPT) or its lengths, and when it arrived."""

    line: int  # where it was read (1-based: a JSON array's index, a CSV/JSONL line)
    prompt: str | None = None
    completion: str | None = None  # ShareGPT's reply, whose length sets max_tokens
    input_tokens: int | None = None
    output_tokens: int | None = None
    arrival_s: float | None = None  # seconds after the trace's first request
    hash_ids: tuple[int, ...] = ()  # Mooncake: the prompt's 512-token blocks


def local_text(path: Path, flag: str, limit_bytes: int) -> str:
    """A local file's text, for ``flag``: a file too large, unreadable or not UTF-8 is a
    :class:`DatasetError` naming the flag and the file."""
    try:
        if path.stat().st_size > limit_bytes:
            raise DatasetError(
                f"{flag} {path}: larger than {limit_bytes / 2**20:,.0f} MiB; cut it first"
            )
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{flag} {path}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{flag} {path}: not UTF-8 text (byte {exc.start})") from None


def _text(path: Path) -> str:
    return local_text(path, "--dataset", MAX_TRACE_BYTES)


def _count(path: Path, where: str, value: Any, name: str) -> int:
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        raise DatasetError(f"--dataset {path}, {where}: {name} {value!r} is not a number") from None
    if number < 0 or number != float(value):
        raise DatasetError(f"--dataset {path}, {where}: {name} {value!r} is not a token count")
    return number


def read_sharegpt(path: Path) -> Iterator[TraceItem]:
    try:
        doc = json.loads(_text(path))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"--dataset {path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, list):
        raise DatasetError(f"--dataset {path}: a ShareGPT file is a JSON array of conversations")
    for index, item in enumerate(doc, 1):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(f"--dataset {path}, conversation {index}: no 'conversations' list")
        if len(turns) < 2:
            continue  # vLLM: "Filter out the conversations with less than 2 turns"
        first, reply = turns[0], turns[1]
        if not all(isinstance(t, dict) and isinstance(t.get("value"), str) for t in (first, reply)):
            raise DatasetError(
                f"--dataset {path}, conversation {index}: a turn without a 'value' text"
            )
        yield TraceItem(line=index, prompt=first["value"], completion=reply["value"])


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(_text(path).splitlines())
    fields = [f.strip() for f in reader.fieldnames or []]
    missing = [name for name in required if name not in fields]
    if missing:
        raise DatasetError(
            f"--dataset {path}: the header has no {', '.join(missing)} column "
            f"(found: {', '.join(fields) or 'none'})"
        )
    for number, row in enumerate(reader, 2):
        yield number, {(k or "").strip(): (v or "").strip() for k, v in row.items()}


def read_burstgpt(path: Path) -> Iterator[TraceItem]:
    first: float | None = None
    for number, row in _csv_rows(path, ("Timestamp", "Request tokens", "Response tokens")):
        where = f"line {number}"
        try:
            stamp = float(row["Timestamp"])
        except ValueError:
            raise DatasetError(
                f"--dataset {path}, {where}: Timestamp {row['Timestamp']!r} is not seconds"
            ) from None
        output = _count(path, where, row["Response tokens"], "Response tokens")
        if output == 0:
            continue  # a failed request (BurstGPT logs them with no response)
        first = stamp if first is None else first
        yield TraceItem(
            line=number,
            input_tokens=_count(path, where, row["Request tokens"], "Request tokens"),
            output_tokens=output,
            arrival_s=stamp - first,
        )


def _azure_time(path: Path, where: str, text: str) -> float:
    """'2023-11-16 18:15:46.6805900' (seven decimals) as POSIX seconds."""
    head, _, fraction = text.partition(".")
    try:
        whole = datetime.fromisoformat(head).timestamp()
        return whole + (float(f"0.{fraction}") if fraction else 0.0)
    except ValueError:
        raise DatasetError(
            f"--dataset {path}, {where}: TIMESTAMP {text!r} is not a date and time"
        ) from None


def read_azure(path: Path) -> Iterator[TraceItem]:
    first: float | None = None
    for number, row in _csv_rows(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        where = f"line {number}"
        stamp = _azure_time(path, where, row["TIMESTAMP"])
        first = stamp if first is None else first
        yield TraceItem(
            line=number,
            input_tokens=_count(path, where, row["ContextTokens"], "ContextTokens"),
            output_tokens=_count(path, where, row["GeneratedTokens"], "GeneratedTokens"),
            arrival_s=stamp - first,
        )


def read_mooncake(path: Path) -> Iterator[TraceItem]:
    first: float | None = None
    for number, line in enumerate(_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            raise DatasetError(f"--dataset {path}, {where}: not JSON") from None
        if not isinstance(item, dict) or not {"input_length", "output_length"} <= set(item):
            raise DatasetError(f"--dataset {path}, {where}: needs input_length and output_length")
        hashes = item.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise DatasetError(f"--dataset {path}, {where}: hash_ids must be a list of integers")
        inputs = _count(path, where, item["input_length"], "input_length")
        if (
            hashes
            and not (len(hashes) - 1) * MOONCAKE_BLOCK_TOKENS
            < inputs
            <= len(hashes) * MOONCAKE_BLOCK_TOKENS
        ):
            raise DatasetError(
                f"--dataset {path}, {where}: {len(hashes)} hash_ids of "
                f"{MOONCAKE_BLOCK_TOKENS} tokens cannot hold input_length {inputs}"
            )
        stamp = float(_count(path, where, item.get("timestamp", 0), "timestamp")) / 1000
        first = stamp if first is None else first
        yield TraceItem(
            line=number,
            input_tokens=inputs,
            output_tokens=_count(path, where, item["output_length"], "output_length"),
            arrival_s=stamp - first,
            hash_ids=tuple(hashes),
        )


READERS = {
    "sharegpt": read_sharegpt,
    "burstgpt": read_burstgpt,
    "azure": read_azure,
    "mooncake": read_mooncake,
}


def read_trace(kind: str, path: str | Path) -> list[TraceItem]:
    items = list(READERS[kind](Path(path)))
    if not items:
        raise DatasetError(f"--dataset {path} holds no request a {kind} trace can send")
    return items


def is_sharegpt_pair_kept(prompt_tokens: int, output_tokens: int) -> bool:
    """vLLM's ShareGPT filter (``is_valid_sequence`` with its defaults)."""
    return (
        prompt_tokens >= SHAREGPT_MIN_TOKENS
        and output_tokens >= SHAREGPT_MIN_TOKENS
        and prompt_tokens <= SHAREGPT_MAX_PROMPT_TOKENS
        and prompt_tokens + output_tokens <= SHAREGPT_MAX_TOTAL_TOKENS
    )


def shuffled(items: list[TraceItem], seed: int) -> list[TraceItem]:
    """ShareGPT's order: shuffled with the seed (vLLM's sampling); traces keep theirs."""
    out = list(items)
    random.Random(seed).shuffle(out)
    return out


async def trace_requests(
    kind: str,
    path: str | Path,
    *,
    num_requests: int,
    seed: int,
    endpoint: str,
    ignore_eos: bool,
    count: Tokenizer | None,
) -> list[Request]:
    """The first ``num_requests`` requests of a trace (ShareGPT: of its seeded shuffle, kept
    by vLLM's length filter, the reply's length as max_tokens)."""
    items = read_trace(kind, path)

    def request(i: int, text: str, output_len: int, planned: int | None) -> Request:
        return make_request(endpoint, ignore_eos, i, text, output_len, planned)

    if kind == "sharegpt":
        return await _from_sharegpt(path, shuffled(items, seed), count, num_requests, request)
    limit = asyncio.Semaphore(TOKENIZE_CONCURRENCY)

    async def one(i: int, item: TraceItem) -> Request:
        inputs, outputs = max(item.input_tokens or 1, 1), max(item.output_tokens or 1, 1)
        if item.hash_ids:
            text, planned = _mooncake_prompt(seed, item.hash_ids, inputs), None
        else:
            async with limit:  # the words are the seed's and the line's: order does not matter
                own = random.Random(f"{seed}:{item.line}")
                text, planned = await exact_prompt(own, inputs, count)
        return dataclasses.replace(request(i, text, outputs, planned), arrival_s=item.arrival_s)

    return list(await asyncio.gather(*(one(i, it) for i, it in enumerate(items[:num_requests]))))


def _mooncake_prompt(seed: int, hash_ids: tuple[int, ...], input_tokens: int) -> str:
    """A prompt whose 512-token blocks are fixed by their hash ids: two requests that share
    a block id share its text (the last block holds the rest of input_length)."""
    last = input_tokens - MOONCAKE_BLOCK_TOKENS * (len(hash_ids) - 1)
    blocks = []
    for index, block in enumerate(hash_ids):
        words = random.Random(f"mooncake:{seed}:{block}").choices(WORDS, k=MOONCAKE_BLOCK_TOKENS)
        blocks.append(" ".join(words if index < len(hash_ids) - 1 else words[:last]))
    return " ".join(blocks)


async def _from_sharegpt(
    path: str | Path,
    items: list[TraceItem],
    count: Tokenizer | None,
    num_requests: int,
    request: Callable[[int, str, int, int | None], Request],
) -> list[Request]:
    if count is None:
        raise DatasetError(
            f"--workload sharegpt sizes prompts and replies in tokens: the server has no "
            f"/tokenize, so give --tokenizer tokenizer.json (--dataset {path})"
        )
    out: list[Request] = []
    for item in items:
        prompt, reply = item.prompt or "", item.completion or ""
        prompt_tokens, output_tokens = await count(prompt), await count(reply)
        if prompt_tokens is None or output_tokens is None:
            continue
        if not is_sharegpt_pair_kept(prompt_tokens, output_tokens):
            continue
        out.append(request(len(out), prompt, output_tokens, prompt_tokens))
        if len(out) >= num_requests:
            break
    if not out:
        raise DatasetError(f"--dataset {path}: no conversation passes the length filter")
    return out
