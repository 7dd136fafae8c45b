"""Hardware detection's decisions (fake NVML facts, fake /sys and /proc files) and the CPU
backend's accounting (vllm/platforms/cpu.py, vLLM 0.32).

The NVML facts are test doubles for the decision logic only: what NVML really returns is
probed by ``servefit.preflight.probes`` (nvidia-ml-py) and checked on a GPU machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefit.adapters.catalog import gpu_catalog
from servefit.adapters.detect import detect, detect_cpu, gpu_from_nvml, host_memory
from servefit.adapters.model_source import load_model
from servefit.core.engines import select_engine
from servefit.core.engines.vllm_cpu import (
    CPU_PROCESS_BYTES,
    VllmCpuEngine,
    cpu_device,
    cpu_state_dtype,
)
from servefit.core.plan import ServeSettings
from servefit.errors import InvalidArgumentError
from servefit.preflight.facts import GpuFacts, NvmlFacts
from servefit.units import GIB_BYTES

H100 = GpuFacts(
    index=0,
    name="NVIDIA H100 80GB HBM3",
    compute_capability="9.0",
    memory_total_bytes=81559 * 2**20,
    memory_free_bytes=81000 * 2**20,
    memory_used_bytes=559 * 2**20,
)
CPUINFO = (
    "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    "flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile amx_bf16\n"
)
NODE0 = (
    "Node 0 MemTotal:       16777216 kB\nNode 0 MemFree:         4194304 kB\n"
    "Node 0 Active(file):    1048576 kB\nNode 0 Inactive(file):  1048576 kB\n"
    "Node 0 SReclaimable:     524288 kB\n"
)


def fake_files(files: dict[str, str]):
    return files.get


def nvml(*gpus: GpuFacts) -> NvmlFacts:
    return NvmlFacts(driver_version="580.95.05", cuda_driver_version="13.0", gpus=list(gpus))


def test_nvml_gpus_are_matched_to_the_catalog():
    hw = detect("auto", nvml=lambda: nvml(H100, H100.model_copy(update={"index": 1})))
    assert not hw.is_cpu
    assert hw.num_devices == 2
    assert hw.device.name == gpu_catalog().get("H100 80GB").name
    assert "2 x NVIDIA H100 80GB HBM3" in hw.description


def test_mixed_gpus_plan_the_first_kind_and_say_so():
    a40 = H100.model_copy(update={"index": 1, "name": "NVIDIA A40"})
    hw = detect("auto", nvml=lambda: nvml(H100, a40))
    assert hw.num_devices == 1
    assert "NVIDIA A40" in hw.notes[0]


def test_unknown_nvml_gpu_names_the_flag():
    odd = H100.model_copy(update={"name": "NVIDIA Mystery 9000"})
    with pytest.raises(InvalidArgumentError, match="--gpu"):
        gpu_from_nvml(odd, gpu_catalog().get)


def test_no_driver_falls_back_to_the_cpu():
    files = {"/proc/cpuinfo": CPUINFO, "/proc/meminfo": "MemTotal: 8388608 kB\n"}
    hw = detect(
        "auto", nvml=lambda: NvmlFacts(error="no NVIDIA driver found"), read=fake_files(files)
    )
    assert hw.is_cpu
    assert hw.device.vendor == "cpu"
    assert hw.device.memory_bytes == 8 * GIB_BYTES


def test_gpu_cpu_never_asks_nvml():
    def boom() -> NvmlFacts:
        raise AssertionError("NVML probed")

    files = {"/proc/cpuinfo": CPUINFO, "/proc/meminfo": "MemTotal: 8388608 kB\n"}
    assert detect("cpu", nvml=boom, read=fake_files(files)).is_cpu


def test_named_gpu_overrides_detection():
    hw = detect("A40", nvml=lambda: nvml(H100))
    assert hw.device.name == gpu_catalog().get("A40").name


def test_cpu_memory_as_vllms_cpu_worker_reads_it():
    """NUMA node of the first CPU; available = free + file pages + reclaimable slab."""
    files = {
        "/sys/devices/system/node/online": "0-1\n",
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
        "/sys/devices/system/node/node1/cpulist": "4-7\n",
        "/sys/devices/system/node/node0/meminfo": NODE0,
        "/sys/fs/cgroup/memory.max": "max\n",
    }
    total, available, where = host_memory(fake_files(files), cpu=0)
    assert total == 16 * GIB_BYTES
    assert available == (4 + 1 + 1 + 0.5) * GIB_BYTES
    assert where == "NUMA node 0"


def test_cgroup_limit_clamps_the_node():
    files = {
        "/sys/devices/system/node/online": "0\n",
        "/sys/devices/system/node/node0/cpulist": "0-3\n",
        "/sys/devices/system/node/node0/meminfo": NODE0,
        "/sys/fs/cgroup/memory.max": str(8 * GIB_BYTES),
        "/sys/fs/cgroup/memory.current": str(6 * GIB_BYTES),
    }
    total, available, where = host_memory(fake_files(files), cpu=0)
    assert (total, available) == (8 * GIB_BYTES, 2 * GIB_BYTES)
    assert "cgroup" in where


def test_cpu_isa_flags_reach_the_device():
    files = {"/proc/cpuinfo": CPUINFO, "/proc/meminfo": "MemTotal: 8388608 kB\n"}
    hw = detect_cpu(fake_files(files))
    assert hw.device.architecture.split() == [
        "avx2",
        "avx512f",
        "avx512_bf16",
        "amx_bf16",
        "amx_tile",
    ]
    assert "Xeon" in hw.device.name


# --------------------------------------------------------------- the CPU backend's accounting

TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "vocab_size": 1024,
    "torch_dtype": "bfloat16",
}


@pytest.fixture
def tiny(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    return load_model(str(tmp_path), allow_hub=False)


CPU = cpu_device(name="CPU", memory_bytes=8 * GIB_BYTES, isa_flags=("avx2",))
CPU_BF16 = cpu_device(name="CPU", memory_bytes=8 * GIB_BYTES, isa_flags=("avx512_bf16",))


def test_cpu_plan_matches_the_real_engine(tiny):
    """vLLM 0.32 CPU, VLLM_CPU_KVCACHE_SPACE=1, max-model-len 4096 (integration-test log):
    'CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 4,096 tokens per request:
    512.00x', block size 128, 16,384 blocks."""
    engine = select_engine(None, CPU, tiny.spec)
    assert isinstance(engine, VllmCpuEngine)
    settings = ServeSettings(
        max_model_len=4096, kv_cache_memory_bytes=GIB_BYTES, vllm_version="0.32"
    )
    plan = engine.plan(tiny.spec, CPU, settings)
    assert (plan.settings.block_size, plan.num_blocks) == (128, 16_384)
    assert plan.kv_cache_tokens == 2_097_152
    assert plan.max_concurrency == 512.0
    assert (plan.settings.max_num_batched_tokens, plan.settings.max_num_seqs) == (2048, 128)
    assert plan.memory.cuda_graph_bytes == 0
    assert not plan.settings.enforce_eager  # not added to the launch command
    assert "--enforce-eager" not in engine.launch_args("m", plan, settings)


def test_cpu_user_block_size_is_kept(tiny):
    settings = ServeSettings(
        max_model_len=4096, kv_cache_memory_bytes=GIB_BYTES, block_size=32, vllm_version="0.32"
    )
    plan = VllmCpuEngine().plan(tiny.spec, CPU, settings)
    assert plan.settings.block_size == 32
    assert plan.max_concurrency == 512.0  # same bytes per token, smaller pages


def test_cpu_auto_kv_is_utilisation_of_host_memory_less_the_process(tiny):
    plan = VllmCpuEngine().plan(tiny.spec, CPU, ServeSettings(vllm_version="0.32"))
    expected = 0.92 * 8 * GIB_BYTES - plan.memory.weights_bytes - CPU_PROCESS_BYTES
    assert plan.memory.kv_cache_bytes == pytest.approx(expected, abs=2)
    assert any("assumption" in a for a in plan.assumptions)


def test_cpu_without_room_does_not_start(tiny):
    tight = cpu_device(name="CPU", memory_bytes=GIB_BYTES, isa_flags=())
    plan = VllmCpuEngine().plan(tiny.spec, tight, ServeSettings(vllm_version="0.32"))
    assert not plan.starts
    assert "VLLM_CPU_KVCACHE_SPACE" in plan.problems[0]


def test_vllm_on_a_cpu_is_the_cpu_backend(tiny):
    assert select_engine("vllm", CPU, tiny.spec).name == "vllm-cpu"
    with pytest.raises(InvalidArgumentError, match="engine 'vllm'"):
        select_engine("vllm-cpu", gpu_catalog().get("A40"), tiny.spec)


def test_recurrent_state_dtype_on_avx512_bf16(catalog_model):
    """vllm/platforms/cpu.py: on AVX-512 BF16 CPUs the SSM cache is float32 unless set to
    bf16/fp16 for a Gated DeltaNet model; other CPUs keep the configured dtype."""
    gdn = catalog_model("Qwen/Qwen3.6-35B-A3B").spec
    assert cpu_state_dtype(gdn, CPU_BF16, None) == "float32"
    assert cpu_state_dtype(gdn, CPU_BF16, "bfloat16") == "bfloat16"
    assert cpu_state_dtype(gdn, CPU, None) is None
    assert cpu_state_dtype(gdn, CPU, "bfloat16") == "bfloat16"
