"""One table turns vLLM's parsed arguments into ServeSettings, for the offline command-line
reader, vLLM's own parser and check-log alike (adapters/vllm_settings.py)."""

from __future__ import annotations

from servefit.adapters.vllm_log import StartupLog
from servefit.adapters.vllm_settings import DESTS, serve_fields
from servefit.app.check_log import settings_from_log
from servefit.core.plan import ServeSettings
from servefit.preflight.vllm_args import parse_vllm_command

LINE = (
    "(APIServer pid=1) INFO 07-02 21:58:11 [api_utils.py:273] non-default args: "
    "{'model': 'm', 'max_model_len': 8192, 'mamba_ssm_cache_dtype': 'float32', "
    "'enable_expert_parallel': True, 'enable_lora': True, 'max_loras': 3, "
    "'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 2}}"
)


def test_a_logs_args_and_a_command_line_give_the_same_settings():
    from_log = settings_from_log(StartupLog.read([LINE]))
    command = parse_vllm_command(
        [
            "vllm",
            "serve",
            "m",
            "--max-model-len",
            "8192",
            "--mamba-ssm-cache-dtype",
            "float32",
            "--enable-expert-parallel",
            "--enable-lora",
            "--max-loras",
            "3",
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 2}',
        ]
    ).settings
    assert from_log == command
    assert from_log["mamba_ssm_cache_dtype"] == "float32"  # check-log used to drop it
    assert from_log["lora"].max_loras == 3 and from_log["speculative"].k == 2
    ServeSettings(**from_log)  # every key is a field


def test_every_destination_is_a_setting_or_folded_into_one():
    fields = set(ServeSettings.__dataclass_fields__)
    for dest in DESTS:
        out = serve_fields(
            {
                dest: {"method": "ngram", "num_speculative_tokens": 1}
                if dest == "speculative_config"
                else True
                if dest == "enable_lora"
                else 1
            }
        )
        assert set(out) <= fields, dest
