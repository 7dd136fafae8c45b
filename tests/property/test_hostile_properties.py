"""Any input, a result or a clear error: Hypothesis over the readers issue 28 names that the
config and record fuzzers (``test_fuzz_*.py``) do not already cover - vLLM's startup log (the
parser and ``check-log``'s whole path), the vLLM command-line parser, the page's query string,
the run history's store, and the redaction itself.

Every test is seeded (``derandomize``: the same examples on every run, so CI is repeatable)
and takes ``SERVEFIT_PROPERTY_EXAMPLES`` examples (default 200; the check-log path, which
plans, a tenth). The long run of the note: ``SERVEFIT_PROPERTY_EXAMPLES=100000 python -m
pytest tests/property/test_hostile_properties.py``. A time bound per example is derived from
a baseline measured in the same test, never a fixed wall-clock figure.
"""

from __future__ import annotations

import contextlib
import json
import os
import string
import time

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from servefit.adapters.redact import REDACTED, is_secret_name, redact_argv, redact_text
from servefit.adapters.vllm_log import StartupLog
from servefit.errors import ServefitError

EXAMPLES = int(os.environ.get("SERVEFIT_PROPERTY_EXAMPLES", "200"))
SEEDED = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
PLANNING = settings(SEEDED, max_examples=max(10, EXAMPLES // 10))
SLOWDOWN = 50  # a case may take this many times its baseline (a busy 2-core machine)
MODEL = "Qwen/Qwen3-8B"

# What a vLLM startup line looks like, and the numbers a hostile log puts in it
PREFIXES = st.sampled_from(
    [
        "",
        "INFO 11-30 07:54:03 [core.py:134] ",
        "(EngineCore_DP0 pid=12) INFO 11-30 07:54:03 [x.py:1] ",
    ]
)
HUGE = st.one_of(
    # the sizes that broke the parser (400 and 5,000 digits), and past 64 bits
    st.sampled_from(["9" * 25, "9" * 400, "9" * 5000, "1" + "0" * 30, "18446744073709551617"]),
    st.sampled_from(["nan", "inf", "-1", "0", "1e400", "1,2,3,,4", "0.0000000001", "12.5"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
)
TEMPLATES = st.sampled_from(
    [
        "vLLM API server version {n}",
        "Model loading took {n} GiB memory and 1.0 seconds",
        "Available KV cache memory: {n} GiB",
        "GPU KV cache size: {n} tokens",
        "Maximum concurrency for {n} tokens per request: {n}x",
        "Setting attention block size to {n} tokens",
        "non-default args: {{'model': 'm', 'max_model_len': {n}, 'block_size': {n}}}",
        "non-default args: {{{n}: [{n}, ({n},)]}}",
        "Free memory on device ({n}/{n} GiB) on startup.",
        "max_num_seqs ({n}) exceeds available Mamba cache blocks ({n})",
        "estimated maximum model length is {n}",
        "Auto set ({n}/{n}) GiB for KV cache on node 0",
        "CUDA out of memory. Tried to allocate {n} GiB",
    ]
)
LOG_LINE = st.one_of(
    st.builds(lambda p, t, n: p + t.format(n=n), PREFIXES, TEMPLATES, HUGE),
    st.text(max_size=300),
    st.builds(lambda n: "non-default args: " + "{1: " * n, st.integers(1, 5000)),
)


def _bounded(run, baseline_s: float) -> None:
    started = time.perf_counter()
    run()
    assert time.perf_counter() - started <= max(5.0, SLOWDOWN * baseline_s)


def _baseline(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


@SEEDED
@given(lines=st.lists(LOG_LINE, max_size=12))
def test_any_log_lines_are_read_without_an_error(lines):
    log = StartupLog.read(lines)  # the parser never raises: a line states facts or none
    for fact in log.facts:
        if isinstance(fact.value, int | float) and not isinstance(fact.value, bool):
            assert abs(fact.value) < 10**24, fact  # no implausible number became a fact


_REAL_LOG = [
    "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.32.0",
    "INFO 01-01 00:00:00 [gpu_worker.py:1] Model loading took 15.27 GiB memory",
    "INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 54.71 GiB",
    "INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 398,352 tokens",
]


@PLANNING
@given(lines=st.lists(LOG_LINE, max_size=8), keep=st.booleans())
def test_any_log_is_checked_or_refused_cleanly(lines, keep):
    """check-log's whole path: the log's flags read back into a deployment and planned."""
    from servefit.app.check_log import check_startup_log
    from servefit.app.deployment import Deployment, Hardware

    d = Deployment(model=MODEL, hardware=Hardware(gpu="H100"), allow_hub=False)

    def check(log: list[str]) -> None:
        with contextlib.suppress(ServefitError):  # a clear error: exit 2 (or 1) from the CLI
            check_startup_log(log, d)

    baseline = _baseline(lambda: check(_REAL_LOG))
    _bounded(lambda: check([*(_REAL_LOG if keep else []), *lines]), baseline)


FLAG_WORDS = st.sampled_from(
    [
        "--model", "--tensor-parallel-size", "-tp", "--max-model-len", "--block-size",
        "--gpu-memory-utilization", "--kv-cache-dtype", "--api-key", "--quantization",
        "--max-num-seqs", "--dtype", "--enable-prefix-caching", "--kv-cache-memory",
        "--pipeline-parallel-size", "--served-model-name", "serve", "vllm", "python", "-m",
        "vllm.entrypoints.openai.api_server", "--", "=",
    ]
)  # fmt: skip
ARG = st.one_of(
    FLAG_WORDS,
    HUGE,
    st.text(max_size=40),
    st.builds(lambda f, v: f"{f}={v}", FLAG_WORDS, HUGE),
)


@SEEDED
@given(argv=st.lists(ARG, max_size=14))
def test_any_vllm_command_is_parsed_or_refused_cleanly(argv):
    from servefit.preflight.vllm_args import parse_vllm_command

    try:
        parsed = parse_vllm_command(argv)
    except ServefitError:
        return
    assert isinstance(parsed.settings, dict)


@SEEDED
@given(
    params=st.dictionaries(
        st.one_of(
            st.sampled_from(
                [
                    "model",
                    "gpu",
                    "max-model-len",
                    "tp",
                    "concurrency",
                    "block-size",
                    "run",
                    "kv-cache-dtype",
                    "gpu-memory-utilization",
                    "input-len",
                    "engine",
                ]
            ),
            st.text(max_size=20),
        ),
        st.one_of(HUGE, st.text(max_size=60)),
        max_size=8,
    )
)
def test_any_page_query_is_a_query_or_a_field_error(params):
    from servefit.ui.query import parse_query

    with contextlib.suppress(ServefitError):
        parse_query(params, page_keys=True)


JSONISH = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=40),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@SEEDED
@given(inputs=st.dictionaries(st.text(max_size=12), JSONISH, max_size=5), results=JSONISH)
def test_the_history_stores_any_run_and_reads_it_back(tmp_path_factory, inputs, results):
    """Whatever a run holds is stored and read back as given, less its secrets (the one
    redaction, applied as the store writes); an id it never gave names no run."""
    from servefit.adapters.redact import redact_data
    from servefit.app.history import DeploymentKey, get_run, list_runs, record_run

    db = tmp_path_factory.mktemp("history") / "h.sqlite"
    key = DeploymentKey(model="m/x", gpu="H100")
    run_id = record_run(db, "plan", key, inputs, {"doc": results})
    run = get_run(db, run_id)
    assert run is not None and list_runs(db)[0].id == run_id
    assert run.inputs == redact_data(json.loads(json.dumps(inputs)))
    assert run.results == redact_data({"doc": json.loads(json.dumps(results))})
    assert get_run(db, run_id + 1) is None and get_run(db, 2**70) is None


# a URL's user-info holds no "/" unencoded; everything else a key or token is made of
# (and starts with no "-": a parser, vLLM's too, reads "--x" after a flag as the next flag)
SECRET = st.text(
    alphabet=string.ascii_letters + string.digits + "-_.+=", min_size=8, max_size=40
).filter(lambda s: not s.startswith("-"))
SECRET_NAMES = st.sampled_from(["api-key", "hf-token", "client-secret", "ssl-key-password"])


@SEEDED
@given(
    secret=SECRET,
    name=SECRET_NAMES,
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    form=st.sampled_from(["flag", "flag=", "json", "python", "env", "url", "bearer", "listed"]),
)
def test_a_secret_in_any_of_its_spellings_never_survives(secret, name, before, after, form):
    under = name.replace("-", "_")
    spelled = {
        "flag": f"--{name} {secret}",
        "flag=": f"--{name}={secret}",
        "json": json.dumps({under: secret}),
        "python": repr({under: secret}),
        "env": f"{under.upper()}={secret}",
        "url": f"https://user:{secret}@host:8000/v1",
        "bearer": f"Authorization: Bearer {secret}",
        "listed": json.dumps([f"--{name}", secret]),
    }[form]
    assume(secret not in before + after and secret not in name)
    assert is_secret_name(f"--{name}")
    out = redact_text(f"{before} {spelled} {after}")
    assert secret not in out
    assert REDACTED in out
    assert redact_text(out) == out  # redacting twice changes nothing more


@SEEDED
@given(
    doc=JSONISH,
    secret=SECRET,
    name=SECRET_NAMES,
    where=st.sampled_from(["command", "mapping", "list"]),
)
def test_a_redacted_json_document_is_still_json(doc, secret, name, where):
    """Files and --json go through the text redaction: it never breaks the document (an
    up run's plan.json, read back by the history, once lost its closing quote)."""
    planted = {
        "command": f"vllm serve m --{name} {secret} --port 1",
        "mapping": {name.replace("-", "_"): secret},
        "list": ["vllm", "serve", f"--{name}", secret],
    }[where]
    assume(secret not in json.dumps(doc) and secret not in name)  # not "password" itself
    text = json.dumps({"doc": doc, "planted": planted}, indent=2)
    out = json.loads(redact_text(text))
    assert secret not in json.dumps(out)
    assert out["doc"] == json.loads(redact_text(json.dumps(doc)))


@SEEDED
@given(argv=st.lists(st.one_of(ARG, SECRET), max_size=10), secret=SECRET)
def test_a_commands_secret_flag_value_never_survives_as_a_list(argv, secret):
    command = [*argv, "--api-key", secret]
    shown = redact_argv(command)
    assert shown[-2:] == ["--api-key", REDACTED]
    assert len(shown) == len(command)


@SEEDED
@given(data=st.binary(max_size=4096), cut=st.integers(min_value=1, max_value=64))
def test_check_log_reads_any_bytes_line_by_line(tmp_path_factory, data, cut):
    from servefit.cli import check_log

    path = tmp_path_factory.mktemp("log") / "vllm.log"
    path.write_bytes(data)
    previous = check_log.MAX_LINE_BYTES
    check_log.MAX_LINE_BYTES = cut
    try:
        lines = check_log._read_lines(str(path))
    finally:
        check_log.MAX_LINE_BYTES = previous
    assert all(len(line.encode("utf-8", errors="replace")) <= 3 * cut for line in lines)
    assert len(lines) <= data.count(b"\n") + 1
