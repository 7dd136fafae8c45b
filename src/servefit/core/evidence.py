"""Does a measurement belong to the planned deployment? Before the report diagnoses a
bottleneck from a benchmark it checks the benchmark could be this model on this GPU:

- the model the server said it serves is the planned one (:func:`served_name_matches`);
- no measured figure is above its physical ceiling: decode above the memory-bandwidth
  roofline, prefill above the compute roofline, output throughput above what the datasheet
  allows (every output token costs at least 2 FLOPs per active parameter, and every decode
  step reads the weights once).

A measured figure may overshoot its ceiling a little without being wrong:
:data:`MEASUREMENT_TOLERANCE` lets 10 % pass, because the datasheet peaks are rounded and
boost clocks run above the rated ones by a few percent, the FLOP and byte counts are
estimates (kernel fusion, embedding lookups), and a mean TTFT or TPOT over a short run
carries timing noise. Beyond 10 % the figure cannot come from this model on this GPU: a
smaller model, another GPU, a cache, or a mock server answered. Pure: numbers in, findings
out.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefit.core.diagnosis import Finding, Verdict

MEASUREMENT_TOLERANCE = 1.10  # measured / ceiling above this: not this model on this GPU


@dataclass(frozen=True, slots=True, kw_only=True)
class Evidence:
    """A benchmark's figures next to the ceilings of the planned model on the planned GPU."""

    planned_model: str  # the model id the report plans
    gpu: str  # "1 x H200-SXM"
    served_model: str | None = None  # the bench's server identity; None: not known
    served_alias: str | None = None  # --served-model-name the server was started with
    decode_bandwidth_fraction: float | None = None  # bytes per step / TPOT / bandwidth
    prefill_compute_fraction: float | None = None  # prefill FLOPs / TTFT / peak FLOP/s
    output_throughput_tok_per_s: float | None = None  # measured, all requests
    output_ceiling_tok_per_s: float | None = None  # the most the datasheet allows


def _names(value: str) -> tuple[str, str]:
    """A served or planned name, compared case-blind: in full, and its last path part."""
    full = value.strip().rstrip("/").lower()
    return full, full.rpartition("/")[2]


def served_name_matches(served: str, planned: str, alias: str | None = None) -> bool:
    """The rule: the server serves the planned model when its name is the planned id, the
    alias given with ``--served-model-name``, or a path whose last part is the model's name
    (``/models/Llama-3.1-8B`` serves ``meta-llama/Llama-3.1-8B``; a local directory planned
    as ``/data/Llama-3.1-8B`` is served as ``meta-llama/Llama-3.1-8B``). Case-blind, a
    trailing slash ignored. A different name (``servefit-null``, ``...-Instruct`` for a base
    model) does not match: pass the alias when the server was started with one."""
    served_full, served_last = _names(served)
    planned_full, planned_last = _names(planned)
    if alias is not None and served_full == _names(alias)[0]:
        return True
    return served_full == planned_full or served_last == planned_last


def _over(fraction: float | None) -> bool:
    return fraction is not None and fraction > MEASUREMENT_TOLERANCE


def check_evidence(e: Evidence) -> tuple[Finding, ...]:
    """One finding naming every reason the measurement cannot be the planned deployment;
    none when it can (then the bottleneck diagnosis reads it)."""
    reasons = []
    if e.served_model is not None and not served_name_matches(
        e.served_model, e.planned_model, e.served_alias
    ):
        planned = e.planned_model + (f" (or {e.served_alias})" if e.served_alias else "")
        reasons.append(f"the server served `{e.served_model}`, the plan is for {planned}")
    ceilings = []
    if _over(e.decode_bandwidth_fraction):
        ceilings.append(
            f"decode would run at {e.decode_bandwidth_fraction:.0%} of {e.gpu}'s memory-bandwidth "
            "roofline"
        )
    if _over(e.prefill_compute_fraction):
        ceilings.append(
            f"prefill would run at {e.prefill_compute_fraction:.0%} of {e.gpu}'s compute roofline"
        )
    if (
        e.output_throughput_tok_per_s is not None
        and e.output_ceiling_tok_per_s
        and e.output_throughput_tok_per_s > MEASUREMENT_TOLERANCE * e.output_ceiling_tok_per_s
    ):
        ceilings.append(
            f"{e.output_throughput_tok_per_s:,.0f} output tok/s measured, above the "
            f"{e.output_ceiling_tok_per_s:,.0f} tok/s {e.gpu}'s datasheet allows for this model"
        )
    if ceilings:
        ceilings[-1] += (
            f" (a measurement may exceed a ceiling by {MEASUREMENT_TOLERANCE - 1:.0%} at most: "
            "rounded datasheet peaks, boost clocks, timing noise)"
        )
    reasons += ceilings
    if not reasons:
        return ()
    return (
        Finding(
            verdict=Verdict.MISMATCH,
            phase="evidence",
            evidence="; ".join(reasons),
            remedy=f"this measurement is not {e.planned_model} on {e.gpu}, so no bottleneck is "
            "diagnosed from it: benchmark the planned model on the planned GPU (`servefit bench` "
            "against its server)"
            + (
                ", or pass --served-model-name when the server uses an alias"
                if len(reasons) > len(ceilings)
                else ", and check that --gpu and the layout are the ones that served it"
            ),
        ),
    )
