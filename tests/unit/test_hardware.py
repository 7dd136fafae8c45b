import tomllib
from importlib import resources

import pytest

from servefit.adapters.catalog import gpu_catalog
from servefit.errors import UnknownGpuError
from servefit.units import GIB_BYTES, MIB_BYTES


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("a100", "A100-80GB-SXM"),
        ("A100-80GB", "A100-80GB-SXM"),
        ("h100-sxm", "H100-SXM"),
        ("H100 SXM", "H100-SXM"),
        ("a40", "A40"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("h200", "H200-SXM"),
    ],
)
def test_forgiving_aliases(alias, name):
    assert gpu_catalog().get(alias).name == name


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(UnknownGpuError, match=r"Did you mean: .*H100"):
        gpu_catalog().get("H10O")


def test_every_row_has_a_source_and_positive_figures():
    catalog = gpu_catalog()
    assert len(catalog) >= 40
    vendors = {g.vendor for g in catalog.gpus}
    assert {"nvidia", "amd", "apple"} <= vendors
    for g in catalog.gpus:
        assert g.source, g.name
        assert g.memory_bandwidth_bytes_per_s > 0
        if g.usable_memory_bytes:
            assert g.usable_memory_bytes <= g.memory_bytes
            assert g.usable_memory_source


def test_datasheet_spot_checks():
    # NVIDIA H100 SXM datasheet: 80 GB, 3.35 TB/s, 989.5 dense BF16 TFLOPS (1979 with sparsity)
    h100 = gpu_catalog().get("H100-SXM")
    assert h100.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h100.bf16_flops_per_s == pytest.approx(989.5e12)
    # Apple M4 Pro press release: 273 GB/s
    assert gpu_catalog().get("M4-Pro").memory_bandwidth_bytes_per_s == pytest.approx(273e9)


def test_cuda_total_matches_vllm_log():
    # vLLM 0.19 on an H100 80GB HBM3 logged "Free memory on device (78.68/79.19 GiB)"
    total = gpu_catalog().get("H100-SXM").cuda_total_bytes
    assert total / GIB_BYTES == pytest.approx(79.19, abs=0.05)
    assert gpu_catalog().get("H100-SXM").usable_memory_bytes == 81_559 * MIB_BYTES


def test_catalog_file_has_no_duplicate_names():
    raw = tomllib.loads(resources.files("servefit.data").joinpath("gpus.toml").read_text())
    names = [g["name"].lower() for g in raw["gpu"]]
    assert len(names) == len(set(names))
