"""``servefit eval``'s runner: every item of a task set sent to an OpenAI-compatible server
with greedy sampling, the answer scored as it arrives.

It is the benchmark's own client (:class:`~servefit.bench.client.OpenAIClient`: one pooled
session, the API key from the environment and never written, a server's error body
redacted), so an eval run also measures each answer's latency. Requests go
``--concurrency`` at a time; the answer is the streamed text; ``temperature`` 0 and a fixed
``seed`` make a run repeatable on an engine that is deterministic at that batch size.

Each scored item is appended to ``items.jsonl`` the moment it is scored. SIGINT or SIGTERM
stops the run: what was scored is kept (and written), the items in flight are left out and
counted as not run, and the run is marked interrupted. An item whose request failed (an
HTTP error, a cut stream, a timeout) is kept with its error and is not scored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from servefit.bench.client import Clock, OpenAIClient, Request
from servefit.bench.config import base_url, url_credentials
from servefit.bench.interrupt import Interrupt
from servefit.bench.output import ResultWriter
from servefit.bench.records import Outcome
from servefit.core.evals import EvalItem, is_correct
from servefit.errors import InvalidArgumentError

ITEMS_FILE = "items.jsonl"


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalConfig:
    base_url: str  # normalised as bench's (no /v1, no user-info: that goes to credentials)
    model: str | None = None  # None: the first model the server lists
    endpoint: str = "completions"  # or "chat": the prompt as one user message
    max_tokens: int = 256
    concurrency: int = 8
    timeout_s: float = 600.0
    seed: int = 0
    api_key_env: str = "OPENAI_API_KEY"
    # "user:password" of the URL's user-info, sent as HTTP Basic authentication, never shown
    credentials: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "credentials", url_credentials(self.base_url))
        object.__setattr__(self, "base_url", base_url(self.base_url))
        if self.endpoint not in ("completions", "chat"):
            raise InvalidArgumentError(f"--endpoint {self.endpoint!r}: completions or chat")
        if self.max_tokens < 1 or self.concurrency < 1 or self.timeout_s <= 0:
            raise InvalidArgumentError(
                "--max-tokens and --concurrency must be >= 1 and --timeout-s > 0"
            )


class ItemRecord(BaseModel):
    """One item's answer, as ``items.jsonl`` keeps it (``correct`` None: not scored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    item_id: str
    task: str
    scorer: str
    reference: str
    answer: str | None = None
    correct: bool | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRunResult:
    model: str
    records: tuple[ItemRecord, ...]  # in the task files' order
    not_run: int  # items never answered (the run was interrupted first)
    interrupted: str | None  # the signal's name


def _request(index: int, item: EvalItem, cfg: EvalConfig) -> Request:
    extra: dict[str, object] = {"temperature": 0.0, "seed": cfg.seed}
    if item.stop:
        extra["stop"] = list(item.stop)
    if cfg.endpoint == "chat":
        return Request(
            request_id=index,
            endpoint="chat",
            messages=[{"role": "user", "content": item.prompt}],
            max_tokens=cfg.max_tokens,
            extra=extra,
        )
    return Request(request_id=index, prompt=item.prompt, max_tokens=cfg.max_tokens, extra=extra)


async def _answer(
    client: OpenAIClient, index: int, item: EvalItem, cfg: EvalConfig, clock: Clock
) -> ItemRecord:
    parts: list[str] = []
    sent = clock()
    record = await client.send(
        _request(index, item, cfg), scheduled_s=sent, clock=clock, on_text=parts.append
    )
    answer = "".join(parts)
    ok = record.outcome is Outcome.OK
    return ItemRecord(
        item_id=item.item_id,
        task=item.task,
        scorer=item.scorer,
        reference=item.reference,
        answer=answer if ok else answer or None,
        correct=is_correct(item, answer) if ok else None,
        error=None if ok else record.error,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        latency_s=None if record.done_s is None else record.done_s - sent,
    )


async def run_eval_async(
    items: Sequence[EvalItem],
    cfg: EvalConfig,
    *,
    api_key: str | None,
    writer: ResultWriter[ItemRecord],
    interrupt: Interrupt,
) -> EvalRunResult:
    by_index: dict[int, ItemRecord] = {}
    async with OpenAIClient(
        [cfg.base_url],
        model=cfg.model,
        api_key=api_key,
        timeout_s=cfg.timeout_s,
        credentials=cfg.credentials,
    ) as client:
        await client.connect()  # an unreachable server: ServerError before any item is sent
        slots = asyncio.Semaphore(cfg.concurrency)
        clock = Clock()

        async def one(index: int, item: EvalItem) -> None:
            async with slots:
                if interrupt.signum is not None:
                    return
                record = await _answer(client, index, item, cfg, clock)
                by_index[index] = record
                writer(record)

        with contextlib.suppress(asyncio.CancelledError), interrupt.watch():
            await asyncio.gather(*(one(i, item) for i, item in enumerate(items)))
        model = client.model or "?"
    records = tuple(by_index[i] for i in sorted(by_index))
    return EvalRunResult(
        model=model,
        records=records,
        not_run=len(items) - len(records),
        interrupted=interrupt.signal_name,
    )


def server_model(cfg: EvalConfig, api_key: str | None) -> str:
    """The model the server answers as (``--model``, else the first it lists); an
    unreachable server is a :class:`~servefit.errors.ServerError`."""

    async def ask() -> str:
        async with OpenAIClient(
            [cfg.base_url], model=cfg.model, api_key=api_key, credentials=cfg.credentials
        ) as client:
            await client.connect()
            return client.model or "?"

    with asyncio.Runner() as runner:
        return runner.run(ask())


def run_eval(
    items: Sequence[EvalItem],
    cfg: EvalConfig,
    *,
    api_key: str | None,
    out_dir: Path | None,
    interrupt: Interrupt,
    listener: Callable[[ItemRecord], None] | None = None,
) -> EvalRunResult:
    """Synchronous entry point; ``items.jsonl`` goes to ``out_dir`` as items are scored."""
    if not items:
        raise InvalidArgumentError("no eval item to run")
    writer: ResultWriter[ItemRecord] = ResultWriter(out_dir, listener, filename=ITEMS_FILE)
    try:
        with asyncio.Runner() as runner:
            return runner.run(
                run_eval_async(items, cfg, api_key=api_key, writer=writer, interrupt=interrupt)
            )
    finally:
        writer.close()
        writer.check()
