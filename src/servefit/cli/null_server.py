"""``servefit null-server``: an OpenAI-compatible server with known timings (TTFT, ITL,
output length), the benchmark client's own ceiling when ``servefit bench`` runs against it.
Exit 2 on an input error."""

from __future__ import annotations

import click

from servefit.cli.output import fail
from servefit.cli.types import NON_NEGATIVE_FLOAT
from servefit.errors import InvalidArgumentError, ServefitError


@click.command("null-server")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--ttft-ms", type=NON_NEGATIVE_FLOAT, default=0.0, show_default=True, help="Delay to 1st token."
)
@click.option(
    "--itl-ms",
    type=NON_NEGATIVE_FLOAT,
    default=0.0,
    show_default=True,
    help="Delay between tokens.",
)
@click.option("--output-len", type=int, default=16, show_default=True, help="Default max_tokens.")
@click.option("--max-concurrency", type=int, help="Requests served at once; the rest queue.")
@click.option(
    "--answers",
    "answer_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="An eval task file: its prompts are answered with their reference answers.",
)
def null_server(
    host: str,
    port: int,
    ttft_ms: float,
    itl_ms: float,
    output_len: int,
    max_concurrency: int | None,
    answer_files: tuple[str, ...],
) -> None:
    """An OpenAI-compatible server with known timings: the client's own ceiling."""
    from servefit.bench.null_server import NullServerConfig, serve

    if ttft_ms < 0 or itl_ms < 0 or output_len < 1:
        fail(InvalidArgumentError("--ttft-ms and --itl-ms must be >= 0 and --output-len >= 1"))
    answers: dict[str, str] = {}
    if answer_files:
        from pathlib import Path

        from servefit.bench.eval_tasks import read_tasks

        try:
            items = read_tasks([Path(f) for f in answer_files])
        except ServefitError as error:
            fail(error)
        answers = {item.prompt: item.reference for item in items}
    click.echo(
        f"servefit null-server on http://{host}:{port} (TTFT {ttft_ms} ms, ITL {itl_ms} ms)",
        err=True,
    )
    config = NullServerConfig(
        ttft_s=ttft_ms / 1000,  # the flags are ms, as vLLM's; the server works in seconds
        itl_s=itl_ms / 1000,
        output_len=output_len,
        max_concurrency=max_concurrency,
        answers=answers,
    )
    serve(host, port, config)
