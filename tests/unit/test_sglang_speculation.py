"""SGLang's speculative decoding (issues 25 and 32): its own flags, the running-request cap
and pool headroom it sets for drafts, the drafter in the memory --mem-fraction-static leaves
out, and a step that drafts ``steps`` passes of ``topk`` branches and verifies the tree.

The numbers are SGLang's rules written out by hand (server_args.py, model_runner.py; the
rules' sources are in servefit.core.engines.sglang_spec)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servefit.cli.main import cli
from servefit.core.engines.sglang_spec import (
    draft_pool_tokens,
    sglang_speculative_config,
)
from servefit.core.speculative import SpecMethod
from servefit.errors import InvalidArgumentError
from servefit.units import MIB_BYTES

EAGLE3 = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "Tengyunw/qwen3_8b_eagle3",
]


def _plan(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(
        cli, ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--json", *args]
    )
    return result.exit_code, json.loads(result.output) if result.output.startswith("{") else {}


def test_the_flags_left_out_are_chosen_as_sglang_chooses_them():
    sc = sglang_speculative_config(
        "eagle3", draft_model_path="head", num_steps=None, eagle_topk=None, num_draft_tokens=None
    )
    assert (sc.method, sc.k, sc.eagle_topk, sc.verify_tokens) == (SpecMethod.EAGLE3, 5, 4, 8)
    mtp = sglang_speculative_config(
        "NEXTN",
        draft_model_path=None,
        num_steps=None,
        eagle_topk=None,
        num_draft_tokens=None,
        is_deepseek=True,
    )
    assert (mtp.method, mtp.k, mtp.eagle_topk, mtp.verify_tokens) == (SpecMethod.MTP, 3, 1, 4)
    # EAGLE without a draft path is the checkpoint's own MTP layers (SGLang's DeepSeek case)
    own = sglang_speculative_config(
        "EAGLE", draft_model_path=None, num_steps=None, eagle_topk=None, num_draft_tokens=None
    )
    assert (own.method, own.model, own.k, own.verify_tokens) == (SpecMethod.MTP, None, 3, 4)
    # a chain verifies steps + 1 whatever --speculative-num-draft-tokens says
    chain = sglang_speculative_config(
        "EAGLE", draft_model_path="head", num_steps=3, eagle_topk=1, num_draft_tokens=16
    )
    assert chain.verify_tokens == 4


def test_the_pool_grows_by_the_drafts_of_every_running_request():
    sc = sglang_speculative_config(
        "EAGLE3", draft_model_path="head", num_steps=5, eagle_topk=4, num_draft_tokens=8
    )
    # 48 x 5 x 4 (draft) + 48 x 8 (verify) + 100 (buffer)
    assert draft_pool_tokens(sc, 48) == 960 + 384 + 100


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"algorithm": "NGRAM"}, "not planned"),
        ({"algorithm": "MEDUSA"}, "SGLang takes EAGLE, EAGLE3, NEXTN, STANDALONE"),
        ({"algorithm": "EAGLE3", "draft_model_path": None}, "--speculative-draft-model-path"),
        ({"algorithm": "STANDALONE", "draft_model_path": ""}, "--speculative-draft-model-path"),
        ({"algorithm": "EAGLE3", "num_steps": 0}, "--speculative-num-steps 0"),
        ({"algorithm": "EAGLE3", "num_steps": None, "eagle_topk": 2}, "need"),
    ],
)
def test_what_sglang_refuses_is_refused_naming_the_flag(kwargs, says):
    given = {
        "algorithm": "EAGLE3",
        "draft_model_path": "head",
        "num_steps": 3,
        "eagle_topk": 1,
        "num_draft_tokens": 4,
    } | kwargs
    with pytest.raises(InvalidArgumentError, match=says):
        sglang_speculative_config(given.pop("algorithm"), **given)


def test_an_eagle3_plan_caps_running_requests_reserves_for_the_drafter_and_grows_the_pool():
    code, spec = _plan(*EAGLE3)
    assert code == 0
    total = spec["memory"]["total_bytes_per_gpu"]
    # 0.5.9's reserve on an 80 GB card: 512 + 1.5 x 8192 (chunk) + 2 x 256 (graph batch) +
    # 1/8 x 1024 MB = 13,440 MiB, above the 10 GiB floor; + 2,048 MiB for an EAGLE drafter
    fraction = round((total - (13_440 + 2_048) * MIB_BYTES) / total, 3)
    assert spec["settings"]["gpu_memory_utilization"] == fraction
    assert spec["settings"]["max_num_seqs"] == 48  # "reset to 48 for speculative decoding"
    # the same pool without speculation, at that fraction and cap: 1,444 tokens fewer
    code, plain = _plan("--mem-fraction-static", str(fraction), "--max-running-requests", "48")
    assert code == 0
    grown = spec["memory"]["kv_cache_tokens"] - plain["memory"]["kv_cache_tokens"]
    assert abs(grown - (48 * 5 * 4 + 48 * 8 + 100)) < 16  # servefit's blocks hold 16 tokens
    assert spec["vllm_command"].endswith(
        "--speculative-algorithm EAGLE3 --speculative-draft-model-path "
        "Tengyunw/qwen3_8b_eagle3 --speculative-num-steps 5 --speculative-eagle-topk 4 "
        "--speculative-num-draft-tokens 8"
    )
    notes = " ".join(spec["assumptions"])
    assert "0.50 GiB of weights" in notes and "1 layer(s)" in notes


def test_speculation_pays_at_batch_one_and_a_wider_tree_costs_more_at_large_batch():
    def decode(*args: str) -> float:
        code, doc = _plan("--concurrency", *args)
        assert code == 0, doc
        return doc["performance"]["decode_tok_per_s"]

    base = decode("1", "--engine", "sglang")
    chain = decode("1", *EAGLE3, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    assert chain > 1.5 * base  # an EAGLE-3 chain of 3 on an 8B model at batch 1
    narrow = decode("48", *EAGLE3, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    wide = decode(
        "48",
        *EAGLE3,
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "8",
        "--speculative-num-draft-tokens",
        "32",
    )
    assert wide < narrow  # the same acceptance, 32 tokens verified a request instead of 4


def test_a_drafter_that_does_not_fit_the_reserve_stops_the_start():
    # a static share that leaves less than the activations plus the drafter outside the pool
    code, doc = _plan(*EAGLE3, "--mem-fraction-static", "0.94")
    assert code == 1
    assert any("runs out of memory loading the drafter" in p for p in doc["problems"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            [
                "--engine",
                "sglang",
                "--speculative-config",
                '{"method":"ngram","num_speculative_tokens":2}',
            ],
            "SGLang speculates with --speculative-algorithm",
        ),
        ([*EAGLE3, "--engine", "vllm"], "SGLang's flags"),
        (["--speculative-num-steps", "3"], "needs --speculative-algorithm"),
        (
            [*EAGLE3, "--speculative-config", '{"method":"ngram","num_speculative_tokens":2}'],
            "give the one of the engine you run",
        ),
    ],
)
def test_one_engines_speculation_flags_are_refused_with_the_other(args, says):
    result = CliRunner().invoke(cli, ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", *args])
    assert result.exit_code == 2, result.output
    assert says in result.output.replace("\n", " ")


def test_an_sglang_logs_server_args_carry_its_speculation_into_the_plan():
    from servefit.app.check_sglang_log import settings_from_server_args

    args = {
        "tp_size": 1,
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "Tengyunw/qwen3_8b_eagle3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }
    sc = settings_from_server_args(args)["speculative"]
    assert (sc.sglang_algorithm, sc.model, sc.k, sc.verify_tokens) == (
        "EAGLE3",
        "Tengyunw/qwen3_8b_eagle3",
        3,
        4,
    )
    with pytest.raises(InvalidArgumentError, match="speculative_num_steps='3'"):
        settings_from_server_args(args | {"speculative_num_steps": "3"})
    assert "speculative" not in settings_from_server_args({"speculative_algorithm": None})


def test_an_sglang_logs_dp_attention_is_planned_as_its_ranks():
    from servefit.app.check_sglang_log import settings_from_server_args

    args = {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}
    got = settings_from_server_args(args)
    assert (got["tensor_parallel_size"], got["data_parallel_size"]) == (1, 8)
    assert got["sglang_dp_attention"] and got["enable_expert_parallel"]
    replicas = settings_from_server_args({"tp_size": 4, "dp_size": 2})
    assert (replicas["tensor_parallel_size"], replicas["data_parallel_size"]) == (4, 2)


def test_eagle_without_a_draft_on_a_checkpoint_without_mtp_layers_is_refused():
    result = CliRunner().invoke(
        cli,
        ["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "--offline", "--speculative-algorithm", "EAGLE"],
    )
    assert result.exit_code == 2
    assert "has none: give the draft's path" in result.output.replace("\n", " ")
