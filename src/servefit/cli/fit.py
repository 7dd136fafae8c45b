"""``servefit fit``: which bundled models fit this hardware, and how well, ranked."""

from __future__ import annotations

import click

from servefit.cli.output import console, emit_json, fail, verdict_exit
from servefit.errors import ServefitError


@click.command()
@click.option(
    "--gpu",
    default="auto",
    show_default=True,
    help="GPU name or alias from the catalog, or auto (this machine: NVIDIA GPUs, else its CPU).",
)
@click.option("--gpu-memory-gib", type=float, help="Describe a custom GPU: memory in GiB.")
@click.option("--gpu-bandwidth-gbps", type=float, help="Custom GPU: memory bandwidth in GB/s.")
@click.option(
    "--task",
    type=click.Choice(["chat", "code", "rag", "agent"]),
    default="chat",
    show_default=True,
    help="The context to hold: chat 8,192 tokens, code and rag 32,768, agent 65,536.",
)
@click.option("--context", "context_tokens", type=int, help="The context in tokens instead.")
@click.option("--search", metavar="TEXT", help="Only the models whose id holds every word.")
@click.option("--gguf", metavar="TYPE", help="Also plan each model as a GGUF of this type.")
@click.option(
    "--ollama",
    is_flag=True,
    help="Also plan every model Ollama has pulled here (its store: OLLAMA_MODELS or "
    "~/.ollama/models), each from its GGUF file.",
)
@click.option("--top", type=int, default=20, show_default=True, help="Rows to print (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Every row as JSON.")
def fit(
    gpu: str,
    gpu_memory_gib: float | None,
    gpu_bandwidth_gbps: float | None,
    task: str,
    context_tokens: int | None,
    search: str | None,
    gguf: str | None,
    ollama: bool,
    top: int,
    as_json: bool,
) -> None:
    """Which bundled models fit this machine (or --gpu), as published and in fp8 (and as a
    GGUF with --gguf): the largest that fit first, each with the longest context it holds,
    the requests of the task's context it holds at once, and one request's decode speed.
    Each row is what `servefit plan MODEL --max-model-len C` says. Exit 0 when at least one
    fits, 1 when none does, 2 for bad input."""
    from servefit.adapters.catalog import model_ids
    from servefit.app.deployment import Hardware
    from servefit.app.fit import fit_models, matching_models

    if top < 0:
        raise click.UsageError(f"--top must be >= 0, got {top}")
    try:
        known = list(model_ids())
        if ollama:
            from servefit.adapters.ollama_store import models_dir, pulled_models

            pulled = pulled_models()
            if not pulled:
                from servefit.errors import InvalidArgumentError

                raise InvalidArgumentError(
                    f"--ollama: no model in the Ollama store at {models_dir()} (`ollama pull` "
                    "one, or set OLLAMA_MODELS)"
                )
            known += pulled
        ids = matching_models(known, search)
        hardware = Hardware(
            gpu=None if gpu_memory_gib is not None and gpu == "auto" else gpu,
            memory_gib=gpu_memory_gib,
            bandwidth_gb_per_s=gpu_bandwidth_gbps,
        )
        outcome = fit_models(hardware, ids, task=task, context_tokens=context_tokens, gguf=gguf)
    except ServefitError as error:
        fail(error)
    if as_json:
        emit_json(outcome.document(top))
    else:
        from servefit.cli.render import render_fit

        render_fit(outcome, outcome.rows if top == 0 else outcome.rows[:top], console())
    verdict_exit(bool(outcome.fitting))
