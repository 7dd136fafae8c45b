"""vLLM's human-readable integers (``--max-model-len 32k``), worked by hand.

The rules (vLLM 0.32, ``vllm/utils/argparse_utils.py`` ``human_readable_int``): lowercase
k/m/g/t multiply by 10^3/10^6/10^9/10^12, uppercase K/M/G/T by 2^10/2^20/2^30/2^40, decimals
only with a lowercase suffix. tests/integration/test_vllm_args_vs_engine.py checks the same
spellings against vLLM's own function.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from servefit.cli.types import HUMAN_INT
from servefit.errors import InvalidArgumentError
from servefit.units import parse_human_int


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32768", 32_768),
        ("32k", 32_000),  # 32 x 1000
        ("32K", 32_768),  # 32 x 1024
        ("25.6k", 25_600),  # 25.6 x 1000
        ("0.5k", 500),
        ("1m", 1_000_000),
        ("1M", 1_048_576),  # 2^20
        ("2g", 2_000_000_000),
        ("2G", 2_147_483_648),  # 2 x 2^30
        ("1t", 1_000_000_000_000),
        ("1T", 1_099_511_627_776),  # 2^40
        ("8K", 8_192),
        (" 8k ", 8_000),  # vLLM strips whitespace
        ("+5", 5),  # without a suffix vLLM calls int(): a sign and underscores are fine
        ("32_768", 32_768),
        ("0", 0),
        ("-0", 0),
        ("007", 7),
        # vLLM computes int(float("1.001") * 1000) = int(1000.9999999999999): the number it
        # serves is 1000, so that is the number planned.
        ("1.001k", 1_000),
    ],
)
def test_vllm_spellings(text, expected):
    assert parse_human_int(text, flag="--max-model-len") == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1.5K", r"decimals only with a decimal suffix \(write 1.5k for 1.5 x 10\^3\)"),
        ("0.5G", r"write 0.5g for 0.5 x 10\^9"),
        ("-5", "must not be negative"),
        ("-1", "must not be negative"),  # auto is --max-model-len's business, not ours
        ("", "is not an integer"),
        ("   ", "is not an integer"),
        ("auto", "is not an integer"),
        ("nan", "is not an integer"),
        ("inf", "is not an integer"),
        ("1e3", "is not an integer"),
        ("1.0", "is not an integer"),  # no suffix: int("1.0") fails in vLLM too
        ("0x10", "is not an integer"),
        ("1_000k", "is not an integer"),
        ("1__0", "is not an integer"),
        (".5k", "is not an integer"),
        ("5.k", "is not an integer"),
        ("-1k", "is not an integer"),
        ("32 k", "is not an integer"),
        ("32kk", "is not an integer"),
        ("10GiB", r"no byte units in vLLM \(write 10G for 10 GiB, 10g for 10 GB\)"),
        ("1.5GB", r"no byte units in vLLM \(write 1.5g for 1.5 GB\)"),
        ("٣٢k", "ASCII digits"),  # Arabic-Indic digits: vLLM's regex would take them
        ("9" * 30, "too large"),
        ("9223372036854775808", "too large"),  # 2^63
        ("9999999999T", "too large"),  # 9,999,999,999 x 2^40 > 2^63
        ("9" * 400 + "k", "too many digits"),  # vLLM overflows a float here
        ("1." + "0" * 60 + "1k", "too many digits"),
    ],
)
def test_refuses_what_cannot_be_a_count(text, reason):
    with pytest.raises(InvalidArgumentError, match=reason) as caught:
        parse_human_int(text, flag="--max-num-batched-tokens")
    message = str(caught.value)
    assert message.startswith("--max-num-batched-tokens ")
    assert "32k (= 32,000), 32K (= 32,768)" in message  # the spellings that work


def test_largest_64_bit_value_is_accepted():
    assert parse_human_int("9223372036854775807", flag="--x") == 2**63 - 1
    assert parse_human_int("8388607T", flag="--x") == 8_388_607 * 2**40


@given(st.integers(min_value=0, max_value=2**40))
def test_suffixes_multiply(n):
    assert parse_human_int(str(n), flag="--x") == n
    assert parse_human_int(f"{n}K", flag="--x") == n * 1024
    assert parse_human_int(f"{n}k", flag="--x") == n * 1000  # exact in a float below 2^53


def _command() -> click.Command:
    @click.command()
    @click.option("--max-model-len", type=HUMAN_INT, default=4096)
    def command(max_model_len: int) -> None:
        click.echo(repr(max_model_len))

    return command


@pytest.mark.parametrize(
    ("args", "output"),
    [(["--max-model-len", "32k"], "32000"), ([], "4096"), (["--max-model-len=8K"], "8192")],
)
def test_click_type_reads_vllm_spellings(args, output):
    result = CliRunner().invoke(_command(), args)
    assert result.exit_code == 0 and result.output.strip() == output


def test_click_type_refusal_is_a_usage_error_naming_the_flag():
    result = CliRunner().invoke(_command(), ["--max-model-len", "1.5K"])
    assert result.exit_code == 2
    assert "--max-model-len allows decimals only with a decimal suffix" in result.output
