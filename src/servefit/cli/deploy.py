"""``servefit deploy``: plan a deployment and write the manifests that run it (the ``vllm
serve`` command, docker compose, Kubernetes, Ray for bare metal) into ``--emit DIR``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from servefit.cli.options import build_deployment, deployment_options, scaling_options
from servefit.cli.output import EXIT_DOES_NOT_FIT, fail
from servefit.errors import InvalidArgumentError, ServefitError


def _split(text: str | None) -> tuple[int, int] | None:
    """``--disaggregated P:D`` -> (P, D) replicas."""
    if text is None:
        return None
    prefill, sep, decode = text.partition(":")
    if not sep or not prefill.isdigit() or not decode.isdigit() or "0" in (prefill, decode):
        raise InvalidArgumentError(
            f"--disaggregated {text!r}: give prefill and decode replicas as P:D, e.g. 1:2"
        )
    return int(prefill), int(decode)


@click.command()
@click.argument("model")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@deployment_options
@click.option(
    "--emit",
    "emit_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write the manifests into (empty or new).",
)
@click.option("--image", help="Server image [vllm/vllm-openai at the planned vLLM version].")
@click.option("--replicas", type=int, default=1, show_default=True, help="Replicas to run.")
@scaling_options(
    "Scaling: deploy the best TP x PP x DP layout of N GPUs (its DP becomes replicas)."
)
@click.option(
    "--hf-token-secret",
    default="hf-token",
    show_default=True,
    help="Kubernetes Secret holding HF_TOKEN (key 'token'); '' for none.",
)
@click.option(
    "--disaggregated",
    "pd_split",
    metavar="P:D",
    help="Disaggregated prefill/decode: P prefill and D decode replicas (NIXL connector).",
)
@click.option(
    "--use-recommendation", is_flag=True, help="Deploy the recommendation when it does not fit."
)
@click.option(
    "--force", is_flag=True, help="Write even when it does not fit, or into a non-empty DIR."
)
def deploy(
    model: str,
    extra: tuple[str, ...],
    emit_dir: str,
    image: str | None,
    replicas: int,
    num_gpus: int | None,
    gpus_per_node: int,
    objective: str,
    hf_token_secret: str,
    pd_split: str | None,
    use_recommendation: bool,
    force: bool,
    **flags: Any,
) -> None:
    """Plan MODEL and write the manifests that run it into --emit DIR.

    \b
    servefit deploy MODEL [plan's flags] --emit DIR [--replicas N | --num-gpus N]
                    [-- extra vllm flags]

    DIR gets vllm-serve.sh (the exact command), compose.yaml, k8s/ (Deployment + Service,
    a LeaderWorkerSet with Ray when a replica spans nodes, prefill/decode deployments with
    --disaggregated), ray/ (bare metal, multi-node) and README.txt. The token is a Secret
    reference, never a value. Exit 0 written, 1 does not fit (nothing written; --force
    writes anyway), 2 input error or a non-empty DIR without --force.
    """
    from servefit.app.deploy import disaggregate, manifest_spec_from_plan, write_manifests
    from servefit.app.plan import plan_deployment

    try:
        split = _split(pd_split)
        d = build_deployment(model, flags, extra_args=tuple(extra))
        if num_gpus is not None:
            from servefit.app.deploy import plan_best_layout
            from servefit.app.scaling import ScalingRequest

            request = ScalingRequest(
                num_gpus=num_gpus, gpus_per_node=gpus_per_node, objective=objective
            )
            outcome, data_parallel = plan_best_layout(d, request)
            replicas *= data_parallel
        else:
            outcome = plan_deployment(d, with_performance=False)
        recommended = use_recommendation and not outcome.fits
        if not outcome.fits and not force and not (recommended and outcome.recommendation):
            _refuse(outcome)
        spec = manifest_spec_from_plan(
            outcome,
            replicas=replicas,
            gpus_per_node=gpus_per_node,
            image=image,
            hf_token_secret=hf_token_secret or None,
            use_recommendation=recommended,
        )
        if split is not None:
            spec = disaggregate(spec, prefill_replicas=split[0], decode_replicas=split[1])
        paths = write_manifests(spec, Path(emit_dir), force=force)
    except ServefitError as error:
        fail(error)
    _report(spec, paths, Path(emit_dir), fits=outcome.fits)


def _refuse(outcome: Any) -> None:
    from servefit.adapters.redact import redact_text

    reasons = "; ".join(outcome.verdict.reasons) or "the plan does not fit"
    click.echo(f"does not fit: {reasons}", err=True)
    if outcome.recommended_command:
        click.echo(
            f"recommended: {redact_text(outcome.recommended_command)} "
            "(--use-recommendation writes its manifests)",
            err=True,
        )
    click.echo("nothing written; --force writes the manifests of this plan anyway", err=True)
    sys.exit(EXIT_DOES_NOT_FIT)


def _report(spec: Any, paths: list[Path], out_dir: Path, *, fits: bool) -> None:
    from servefit.adapters.manifests_k8s import server_startup_probe
    from servefit.adapters.redact import redact_text

    if not fits:
        click.echo("warning: the plan does not fit; manifests written because of --force", err=True)
    if Path(spec.model).expanduser().exists():
        click.echo(
            f"warning: the model is a local path ({spec.model}): mount it into the containers "
            "at that path, or deploy its Hugging Face id",
            err=True,
        )
    click.echo(redact_text(shlex.join(spec.vllm_args)))
    for path in paths:
        click.echo(f"  wrote {path.relative_to(out_dir)}")
    probe = server_startup_probe(spec)
    click.echo(
        f"{spec.gpus_per_replica} GPU(s) per replica on {spec.nodes_per_replica} node(s), "
        f"{spec.replicas} replica(s), image {spec.image}; predicted load "
        f"{spec.predicted_load_s:.0f} s, startup probe {probe.budget_s} s. See README.txt."
    )
