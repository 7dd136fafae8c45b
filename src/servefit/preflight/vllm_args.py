"""Read the model and the flags that matter from a vLLM command line, so nothing is
written twice: ``servefit preflight --from-vllm-args -- vllm serve MODEL --tensor-parallel-size 2``.

This is the offline reader, for machines without the engine; where vLLM is importable,
:func:`servefit.preflight.engine_args.parse_with_engine` reads the same line with vLLM's
own parser, and an integration test holds the two to the same answers. Both follow
vLLM 0.32's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``) and the serve
flags of ``vllm/engine/arg_utils.py``:

- ``vllm serve MODEL``, ``vllm serve --model MODEL`` (vLLM moves ``--model`` to the front),
  ``python -m vllm.entrypoints.openai.api_server --model MODEL`` and
  ``python -m vllm.entrypoints.cli.main serve MODEL``;
- ``--flag value`` and ``--flag=value``, short aliases (``-tp 2``, ``-tp=2``, ``-pp``,
  ``-q``) and underscores for dashes in long names (``--max_model_len``);
- ``--max-model-len``, ``--max-num-batched-tokens`` and ``--kv-cache-memory-bytes`` take
  vLLM's human-readable integers (``32k`` = 32,000, ``32K`` = 32,768); ``--max-model-len``
  also takes ``auto`` or ``-1`` (fit the longest context the memory allows);
  ``--max-num-seqs``, ``--block-size`` and the parallel sizes take plain integers;
- booleans are switches without a value: ``--enable-prefix-caching`` and
  ``--no-enable-prefix-caching`` (the last one written wins, as in vLLM);
- ``None`` (or an empty value) for ``--kv-cache-memory-bytes`` and ``--quantization``
  means vLLM's default, as vLLM reads it.

``settings`` holds only what the command line sets (keyword arguments of
``ServeSettings``); a setting left out means vLLM's default. Flags servefit does not model
are skipped; the offline reader cannot know which of them take a value, nor vLLM's
abbreviations (``--max-model`` for ``--max-model-len``), nor a ``--config`` file: the
engine reader can.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from servefit.adapters.redact import is_secret_name
from servefit.adapters.vllm_settings import DESTS, serve_fields
from servefit.errors import InvalidArgumentError
from servefit.units import parse_human_int

CommandForm = Literal["serve", "api_server"]
# The modules that run vLLM's OpenAI-compatible server from a `--model` flag (0.32 keeps the
# old path as a deprecated alias of the new one).
API_SERVER_MODULES = (
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.launchers.api_server.entry",
)
CLI_MODULE = "vllm.entrypoints.cli.main"

# The vLLM destinations the readers fill (adapters/vllm_settings.py turns them into settings)
SETTING_FIELDS = DESTS
_BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "0", "1"})


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmCommand:
    """What a vLLM command line asks for.

    ``settings`` holds the ``ServeSettings`` keyword arguments the line sets (left out: vLLM's
    default). ``is_max_model_len_auto`` is ``--max-model-len auto`` (or ``-1``): vLLM starts
    from the model's longest context and shortens it until the KV cache fits, so a plan at
    the model's full context that does not fit is not, by itself, a failed launch.
    """

    model: str
    settings: dict[str, Any] = field(default_factory=dict)
    is_max_model_len_auto: bool = False
    # flags servefit does not model (with their values), to carry them verbatim; only the
    # offline reader collects them, so two readings compare equal without them
    extra_args: tuple[str, ...] = field(default=(), compare=False)


def split_vllm_command(args: list[str]) -> tuple[CommandForm, list[str]]:
    """Which vLLM entry point a command runs, and its arguments after the program."""
    if len(args) >= 2 and args[0].endswith("vllm") and args[1] == "serve":
        return "serve", list(args[2:])
    if "-m" in args:
        at = args.index("-m")
        module = args[at + 1] if at + 1 < len(args) else ""
        if module in API_SERVER_MODULES:
            return "api_server", list(args[at + 2 :])
        if module == CLI_MODULE and args[at + 2 : at + 3] == ["serve"]:
            return "serve", list(args[at + 3 :])
    raise InvalidArgumentError(
        f"--from-vllm-args expects `vllm serve MODEL ...` or `python -m "
        f"vllm.entrypoints.openai.api_server --model MODEL ...`, got: {' '.join(args)[:120]}"
    )


def _int(text: str, *, flag: str) -> int:
    try:
        return int(text)  # argparse's type=int: "+2", " 2 ", "2_0" are all integers
    except ValueError:
        raise InvalidArgumentError(f"vLLM flag {flag} takes an integer, got {text!r}") from None


def _float(text: str, *, flag: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidArgumentError(f"vLLM flag {flag} takes a number, got {text!r}") from None


def _str(text: str, *, flag: str) -> str:
    return text


def _optional(convert: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's ``optional_type``: ``None`` or an empty value means the default."""

    def read(text: str, *, flag: str) -> Any:
        return None if text in ("", "None") else convert(text, flag=flag)

    return read


def _model_len(text: str, *, flag: str) -> int:
    """vLLM's ``human_readable_int_or_auto``: ``auto`` and ``-1`` are -1 (fit to memory)."""
    if text.strip() == "-1" or text.strip().lower() == "auto":
        return -1
    return parse_human_int(text, flag=flag)


# vLLM 0.32 option string -> (ServeSettings field, converter). `--kv-cache-memory` is not a
# flag of its own but vLLM's argparse accepts it as the unique abbreviation it is.
_VALUE_FLAGS: dict[str, tuple[str, Callable[..., Any]]] = {
    "--tensor-parallel-size": ("tensor_parallel_size", _int),
    "-tp": ("tensor_parallel_size", _int),
    "--pipeline-parallel-size": ("pipeline_parallel_size", _int),
    "-pp": ("pipeline_parallel_size", _int),
    "--data-parallel-size": ("data_parallel_size", _int),
    "-dp": ("data_parallel_size", _int),
    "--max-model-len": ("max_model_len", _model_len),
    "--max-num-seqs": ("max_num_seqs", _int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", parse_human_int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _float),
    "--device-memory-utilization": ("gpu_memory_utilization", _float),
    "--kv-cache-dtype": ("kv_cache_dtype", _str),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", _optional(parse_human_int)),
    "--kv-cache-memory": ("kv_cache_memory_bytes", _optional(parse_human_int)),
    "--block-size": ("block_size", _int),
    "--mamba-ssm-cache-dtype": ("mamba_ssm_cache_dtype", _str),
    "--dtype": ("dtype", _str),
    "--quantization": ("quantization", _optional(_str)),
    "-q": ("quantization", _optional(_str)),
    "--speculative-config": ("speculative_config", _optional(_str)),
    "--max-loras": ("max_loras", _int),
    "--max-lora-rank": ("max_lora_rank", _int),
    "-sc": ("speculative_config", _optional(_str)),
}
_SWITCHES: dict[str, tuple[str, bool]] = {
    "--enforce-eager": ("enforce_eager", True),
    "--no-enforce-eager": ("enforce_eager", False),
    "--enable-prefix-caching": ("enable_prefix_caching", True),
    "--no-enable-prefix-caching": ("enable_prefix_caching", False),
    "--enable-chunked-prefill": ("enable_chunked_prefill", True),
    "--no-enable-chunked-prefill": ("enable_chunked_prefill", False),
    "--enable-expert-parallel": ("enable_expert_parallel", True),
    "--enable-lora": ("enable_lora", True),
    "--no-enable-lora": ("enable_lora", False),
    "-ep": ("enable_expert_parallel", True),
    "--no-enable-expert-parallel": ("enable_expert_parallel", False),
}


def _normalise(arg: str) -> tuple[str, str | None]:
    """``--max_model_len=4k`` -> (``--max-model-len``, ``4k``): vLLM turns underscores in a
    long flag's name (up to its first dot) into dashes."""
    flag, eq, inline = arg.partition("=")
    if flag.startswith("--"):
        name, dot, rest = flag[2:].partition(".")
        flag = "--" + name.replace("_", "-") + dot + rest
    return flag, (inline if eq else None)


def parse_vllm_command(args: list[str]) -> VllmCommand:
    """The model and servefit-relevant settings of a vLLM command line, read without vLLM."""
    form, rest = split_vllm_command(args)
    # `vllm serve` moves --model to the front, wherever it is written.
    has_model_flag = form == "serve" and any(_normalise(a)[0] == "--model" for a in rest)
    model_flag: str | None = None
    positionals: list[str] = []  # bare words that no flag we know consumed
    after_unknown: list[str] = []  # bare words right after a flag we do not model
    extra: list[str] = []  # the flags we do not model, with their values, in order
    raw: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        arg = rest[i]
        flag, inline = _normalise(arg)
        if flag == "--model":
            model_flag, i = _take_value(rest, i, flag, inline)
        elif flag in _VALUE_FLAGS:
            key, convert = _VALUE_FLAGS[flag]
            text, i = _take_value(rest, i, flag, inline)
            raw[key] = convert(text, flag=flag)
        elif flag in _SWITCHES:
            has_model = has_model_flag or bool(positionals)
            _check_switch(flag, inline, rest[i + 1 : i + 2], has_model=has_model)
            key, raw[key] = _SWITCHES[flag]
            i += 1
        elif arg.startswith("-") and len(arg) > 1:
            # A flag servefit does not model: the next bare word may be its value, or not.
            extra.append(arg)
            if inline is None and i + 1 < len(rest) and not rest[i + 1].startswith("-"):
                if not is_secret_name(flag):  # `--api-key sk-...`: a value, never the model
                    after_unknown.append(rest[i + 1])
                extra.append(rest[i + 1])
                i += 1
            i += 1
        else:
            positionals.append(arg)
            i += 1
    model = _model(form, model_flag, positionals, after_unknown)
    if model_flag is None and model in after_unknown and model in extra:
        extra.remove(model)  # `vllm serve --trust-remote-code MODEL`: the word is the model
    command = command_from_values(model, raw)
    return replace(command, extra_args=tuple(extra))


def _take_value(rest: list[str], i: int, flag: str, inline: str | None) -> tuple[str, int]:
    """The value of the flag at ``rest[i]`` and the index after it."""
    if inline is not None:
        return inline, i + 1
    if i + 1 >= len(rest):
        raise InvalidArgumentError(f"vLLM flag {flag} has no value")
    return rest[i + 1], i + 2


def _check_switch(flag: str, inline: str | None, following: list[str], *, has_model: bool) -> None:
    """vLLM's booleans are switches: ``--enable-prefix-caching=false`` and (once the model is
    named) ``--enable-prefix-caching false`` are errors there, so they are errors here."""
    if inline is None and not (has_model and following and following[0].lower() in _BOOL_WORDS):
        return
    word = inline if inline is not None else following[0]
    positive = flag.replace("--no-", "--", 1)
    negative = positive.replace("--", "--no-", 1)
    raise InvalidArgumentError(
        f"vLLM flag {flag} takes no value (got {word!r}): write {positive} or {negative}"
    )


def _model(
    form: CommandForm, model_flag: str | None, positionals: list[str], after_unknown: list[str]
) -> str:
    """The model vLLM will serve, as vLLM finds it."""
    if form == "api_server":
        # The API server entry reads only --model (a bare word is not its model).
        if model_flag is None:
            raise InvalidArgumentError("the vLLM command names no model (use --model MODEL)")
        return model_flag
    if model_flag is not None:
        return model_flag
    if positionals:
        return positionals[0]
    # `vllm serve --trust-remote-code MODEL`: a word after a flag we do not model is its
    # value or the model. A number (`--port 8000`) is taken for a value.
    candidates = [word for word in after_unknown if not _is_number(word)]
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        raise InvalidArgumentError(
            f"cannot tell which of {', '.join(map(repr, candidates))} is the model without "
            f"vLLM's parser; write the model right after `vllm serve`"
        )
    raise InvalidArgumentError("the vLLM command names no model")


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def command_from_values(model: str, raw: dict[str, Any]) -> VllmCommand:
    """A :class:`VllmCommand` from the values a command line set, as vLLM's parser leaves
    them (None = the default, -1 for ``--max-model-len`` = fit to memory); both readers end
    here, so they represent a line the same way."""
    settings = serve_fields(raw)
    is_auto = settings.get("max_model_len") == -1
    if is_auto:
        del settings["max_model_len"]
    return VllmCommand(model=model, settings=settings, is_max_model_len_auto=is_auto)
