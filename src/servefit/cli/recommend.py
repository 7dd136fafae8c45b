"""``servefit recommend``: which GPUs, how many, which layout, what it costs -- the fleet
that serves a workload within its SLO at the lowest cost, searched over the GPU catalog."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from servefit.cli.options import workload_options
from servefit.cli.output import EXIT_DOES_NOT_FIT, EXIT_OK, console, emit_json, fail
from servefit.cli.types import FINITE_FLOAT
from servefit.errors import InvalidArgumentError, ServefitError


@click.command()
@click.argument("models", nargs=-1, required=True, metavar="MODEL [MODEL...]")
@workload_options
@click.option(
    "--slo-percentile",
    type=int,
    default=90,
    show_default=True,
    help="The SLO holds for this percentile of requests (50, 90, 95, 99).",
)
@click.option("--gpus", default="all", show_default=True, help="GPUs to search: A,B,... or all.")
@click.option("--max-gpus", type=int, help="The fleet's GPU budget (also caps one replica).")
@click.option("--max-usd-per-hour", type=FINITE_FLOAT, help="The fleet's budget in $/hour.")
@click.option(
    "--headroom",
    type=FINITE_FLOAT,
    default=0.10,
    show_default=True,
    help="Replicas carry the rate x (1 + headroom).",
)
@click.option(
    "--success-rate",
    type=FINITE_FLOAT,
    default=1.0,
    show_default=True,
    help="Of tasks (sessions), the share that succeed: $/successful task = $/task / it.",
)
@click.option(
    "--success-from",
    metavar="RUN[:TASK]",
    help="The success rate measured by `servefit eval` (a history id, an --output folder or "
    "an eval.json; a task's accuracy with :TASK) [instead of --success-rate].",
)
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option(
    "--disaggregated/--no-disaggregated",
    default=True,
    show_default=True,
    help="Also size prefill/decode pools (xPyD) with a KV-transfer connector.",
)
@click.option(
    "--fp8/--no-fp8",
    default=True,
    show_default=True,
    help="Also try online fp8 weights and an fp8 KV cache on GPUs with FP8 tensor cores.",
)
@click.option(
    "--top",
    type=int,
    default=5,
    show_default=True,
    help="Fleets simulated in full before the cost bound prunes the rest; rows shown.",
)
@click.option("--vllm-version", default=None, help="vLLM version whose accounting to mirror.")
@click.option(
    "--speculative-config",
    help="Try every option with and without this speculative decoding (vLLM's JSON: n-gram, "
    "suffix or the checkpoint's MTP layers).",
)
@click.option(
    "--acceptance-rate",
    type=FINITE_FLOAT,
    help="The drafts' per-token acceptance (0 to 1) [the method's published figure].",
)
@click.option("--offline", is_flag=True, help="Never contact the Hugging Face Hub.")
@click.option(
    "--emit",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the winner's manifests (compose, Kubernetes) to DIR (servefit deploy's).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the versioned JSON document.")
def recommend(models: tuple[str, ...], as_json: bool, emit: Path | None, **flags: Any) -> None:
    """The cheapest fleet that serves the workload within the SLO: GPU type, GPUs per
    replica, TP/PP/EP layout, weight and KV formats, replicas (or prefill/decode pools),
    $/hour, $/1M output tokens, $/task and the vllm serve line.

    Exit 0 when a fleet meets the SLO, 1 when none does (the binding constraint and the
    closest miss are named), 2 input error.
    """
    from servefit.adapters.fleet_document import recommendation_document
    from servefit.app.fleet import recommend_fleet

    try:
        request = fleet_request(models, flags)
        outcome = recommend_fleet(request)
        written: list[Path] = []
        if emit is not None and outcome.best is not None:
            from servefit.app.fleet_emit import emit_manifests

            written = emit_manifests(request, outcome.best, emit)
    except ServefitError as error:
        fail(error)
    if as_json:
        emit_json(recommendation_document(outcome))
    else:
        from servefit.cli.render_fleet import render_fleet

        out = console()
        render_fleet(outcome, out)
        for path in written:
            out.print(f"wrote {path}")
    sys.exit(EXIT_OK if outcome.best is not None else EXIT_DOES_NOT_FIT)


def fleet_request(models: tuple[str, ...], flags: dict[str, Any]) -> Any:
    """The FleetRequest of the command's flags (input errors raised, exit 2)."""
    from servefit.adapters.catalog import gpu_catalog
    from servefit.app.deployment import default_workload
    from servefit.app.fleet_types import FleetRequest
    from servefit.cli.options import modelled_vllm_version
    from servefit.core.fleet import FleetSlo
    from servefit.core.metrics import Slo

    rate, concurrency = flags["request_rate"], flags["concurrency"]
    if rate is None and concurrency is None:
        raise InvalidArgumentError("give the load: --request-rate R (req/s) or --concurrency C")
    if rate is not None and concurrency is not None:
        raise InvalidArgumentError(
            "give the load one way: --request-rate R (open loop) or --concurrency C (users)"
        )
    if rate is not None and rate <= 0:
        raise InvalidArgumentError(f"--request-rate must be positive, got {rate:g}")
    if flags["engine"] not in (None, "vllm"):
        raise InvalidArgumentError("recommend searches vLLM deployments: drop --engine")
    if any(flags.get(k) is not None for k in ("image_size", "images_per_request")):
        raise InvalidArgumentError(
            "recommend does not count image tokens yet: give --input-len with the images' "
            "tokens added (servefit plan MODEL --image-size WxH prints them)"
        )
    input_len, output_len, ratio = flags["input_len"], flags["output_len"], flags["range_ratio"]
    if flags["dataset"] is not None:
        from servefit.adapters.fleet_dataset import read_dataset_lengths

        lengths = read_dataset_lengths(flags["dataset"], flags["dataset_format"])
        input_len, output_len, ratio = lengths.input_len, lengths.output_len, lengths.range_ratio
    workload = default_workload(
        input_len=input_len,
        output_len=output_len,
        concurrency=concurrency,
        request_rate_per_s=rate,
        prefix_len=flags["prefix_len"],
        turns=flags["turns"],
        range_ratio=ratio,
        num_requests=flags["num_requests"],
    )
    names = [g.strip() for g in flags["gpus"].split(",") if g.strip()]
    if not names:
        raise InvalidArgumentError("--gpus is empty: name GPUs (A,B,...) or say all")
    gpus: tuple[str, ...] = ()
    if [n.lower() for n in names] != ["all"]:
        catalog = gpu_catalog()
        gpus = tuple(catalog.get(n).name for n in names)  # an unknown name: exit 2
    version = modelled_vllm_version(flags["vllm_version"])
    speculative = None
    if flags["speculative_config"] is not None:
        from servefit.adapters.speculative_config import read_speculative_config

        speculative = read_speculative_config(flags["speculative_config"], version)
    from servefit.app.evals import success_terms

    success = success_terms(flags["success_rate"], flags["success_from"])
    return FleetRequest(
        models=models,
        workload=workload,
        slo=FleetSlo(
            slo=Slo(ttft_ms=flags["slo_ttft_ms"], tpot_ms=flags["slo_tpot_ms"]),
            percentile=flags["slo_percentile"],
        ),
        gpus=gpus,
        max_gpus=flags["max_gpus"],
        max_usd_per_hour=flags["max_usd_per_hour"],
        headroom=flags["headroom"],
        gpus_per_node=flags["gpus_per_node"],
        disaggregated=flags["disaggregated"],
        allow_fp8=flags["fp8"],
        success_rate=success["success_rate"],
        success_source=success.get("success_source", ""),
        top=flags["top"],
        allow_hub=not flags["offline"],
        vllm_version=version,
        speculative=speculative,
        acceptance_rate=flags["acceptance_rate"],
    )
