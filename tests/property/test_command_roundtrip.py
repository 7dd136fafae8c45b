"""Every ``vllm serve`` line servefit prints launches the deployment it planned.

For random deployments: the printed command, read back by the same parser
``preflight --from-vllm-args`` uses, gives the settings the plan ran with; and every
recommendation, read back and re-planned, fits."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servefit.app.deployment import Deployment, Hardware, default_workload
from servefit.app.plan import plan_deployment
from servefit.core.plan import ServeSettings
from servefit.preflight.vllm_args import parse_vllm_command

# prefix caching off unless given; its config has no maximum length
PURE_MAMBA = "mistralai/Mamba-Codestral-7B-v0.1"
MODELS = (
    "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen3.6-27B-FP8",
    "Qwen/Qwen3-30B-A3B",
    "google/gemma-2-9b",
    PURE_MAMBA,
)
GPUS = ("A40", "L40S", "H100", "A100-80GB")


@st.composite
def deployments(draw: st.DrawFn) -> Deployment:
    model = draw(st.sampled_from(MODELS))
    return Deployment(
        model=model,
        hardware=Hardware(gpu=draw(st.sampled_from(GPUS))),
        settings=ServeSettings(
            tensor_parallel_size=draw(st.sampled_from((1, 2, 4))),
            max_model_len=draw(
                st.integers(1024, 300_000)
                if model == PURE_MAMBA
                else st.one_of(st.none(), st.integers(1024, 300_000))
            ),
            max_num_seqs=draw(st.one_of(st.none(), st.integers(1, 512))),
            max_num_batched_tokens=draw(st.one_of(st.none(), st.sampled_from((2048, 8192)))),
            gpu_memory_utilization=draw(st.one_of(st.none(), st.sampled_from((0.8, 0.9, 0.95)))),
            kv_cache_dtype=draw(st.sampled_from(("auto", "fp8"))),
            mamba_ssm_cache_dtype=draw(st.sampled_from(("auto", "float16"))),
            # None: vLLM's default for the model; a flag given is printed and read back
            enable_prefix_caching=draw(st.one_of(st.none(), st.booleans())),
            enforce_eager=draw(st.booleans()),
        ),
        workload=default_workload(
            input_len=draw(st.integers(64, 8192)),
            output_len=draw(st.integers(1, 2048)),
            concurrency=draw(st.integers(1, 64)),
            request_rate_per_s=None,
        ),
        is_workload_given=draw(st.booleans()),
        allow_hub=False,
    )


def _as_planned(command: str, d: Deployment) -> ServeSettings:
    import shlex

    parsed = parse_vllm_command(shlex.split(command))
    assert parsed.model == d.model
    known = {f.name for f in fields(ServeSettings)}
    return ServeSettings(**{k: v for k, v in parsed.settings.items() if k in known})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments())
def test_printed_commands_reproduce_the_plan_and_recommendations_fit(d: Deployment) -> None:
    out = plan_deployment(d, with_performance=False)
    r = out.capacity.settings
    again = plan_deployment(
        Deployment(**{**_fields(d), "settings": _as_planned(out.vllm_command, d)}),
        with_performance=False,
    )
    # the command read back plans to the same resolved settings (flags left out take the
    # same vLLM defaults)
    assert again.capacity.settings == r
    assert again.verdict.fits == out.verdict.fits
    if out.recommendation is not None:
        assert out.recommended_command is not None
        rec = plan_deployment(
            Deployment(**{**_fields(d), "settings": _as_planned(out.recommended_command, d)}),
            with_performance=False,
        )
        assert rec.verdict.fits, (out.recommended_command, rec.verdict.reasons)


def _fields(d: Deployment) -> dict:
    return {f.name: getattr(d, f.name) for f in fields(Deployment)}
