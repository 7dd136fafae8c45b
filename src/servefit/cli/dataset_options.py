"""``--dataset FILE --dataset-format F``: a recorded workload. ``plan`` (and every command
that plans a deployment) simulates its requests as they are; ``recommend`` sizes a fleet
for its lengths. The file is read by :mod:`servefit.adapters.fleet_dataset` (token counts)
and :mod:`servefit.bench.traces` (the traces bench replays), so the simulation and the
benchmark see the same requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

DATASET_FORMATS = ("jsonl", "burstgpt", "azure", "mooncake")
LENGTH_PARAMS = ("input_len", "output_len", "range_ratio")  # what a dataset's lines replace

DATASET_OPTIONS = [
    click.option(
        "--dataset",
        type=click.Path(dir_okay=False, path_type=Path),
        help="A JSONL of token counts (input_len, output_len per line) or a trace "
        "(--dataset-format): plan simulates its requests as they are (replayed at its times "
        "when it has them and no --concurrency or --request-rate is given); recommend sizes "
        "for its lengths.",
    ),
    click.option(
        "--dataset-format",
        type=click.Choice(DATASET_FORMATS),
        default="jsonl",
        show_default=True,
        help="What --dataset is: servefit's JSONL of token counts, or a BurstGPT / Azure trace "
        "CSV or a Mooncake trace JSONL (as bench --workload reads them).",
    ),
]


def dataset_requests(flags: dict[str, Any]) -> tuple[tuple[int, int, float | None], ...]:
    """Pop ``--dataset`` and its format: the file's requests, or none."""
    path, kind = flags.pop("dataset", None), flags.pop("dataset_format", "jsonl")
    if path is None:
        return ()
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        from click.core import ParameterSource

        from servefit.errors import InvalidArgumentError

        given = [
            "--" + name.replace("_", "-")
            for name in LENGTH_PARAMS
            if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)
        ]
        if given:
            raise InvalidArgumentError(
                f"{', '.join(given)} and --dataset: the file gives each request's lengths; drop one"
            )
    from servefit.adapters.fleet_dataset import read_dataset_requests

    return read_dataset_requests(path, kind)
