"""The bundled model catalog: coverage, provenance, and published parameter counts."""

import pytest

from servefit.adapters.catalog import find_catalog_model, model_ids
from servefit.core.model_spec import MixerKind
from servefit.core.weights import count_params

RELATIVE_TOLERANCE = 0.005


def test_at_least_40_models_across_families(catalog_model):
    ids = model_ids()
    assert len(ids) >= 40
    specs = [catalog_model(m).spec for m in ids]
    assert sum(s.is_moe for s in specs) >= 10
    assert sum(MixerKind.MLA in s.mixer_kinds for s in specs) >= 3
    assert sum(MixerKind.SLIDING_WINDOW in s.mixer_kinds for s in specs) >= 3
    assert sum(s.is_hybrid for s in specs) >= 5
    assert sum(s.vision is not None for s in specs) >= 3
    assert sum(s.quant.is_quantized for s in specs) >= 8


@pytest.mark.parametrize("model_id", model_ids())
def test_every_entry_parses_and_cites_a_source(model_id, catalog_model):
    entry = find_catalog_model(model_id)
    assert entry.source and entry.confidence
    spec = catalog_model(model_id).spec
    assert count_params(spec).total > 0


def _published():
    for model_id in model_ids():
        entry = find_catalog_model(model_id)
        if entry.published_params:
            yield pytest.param(model_id, entry.published_params, id=model_id)


def _close(ours: float, published: float, precision: float) -> bool:
    """Within 0.5 %, or within the rounding of the published figure (8.2B means 8.15-8.25B)."""
    return abs(ours - published) <= max(RELATIVE_TOLERANCE * published, precision / 2)


@pytest.mark.parametrize(("model_id", "pub"), list(_published()))
def test_param_counts_match_published_figures(model_id, pub, catalog_model):
    counts = count_params(catalog_model(model_id).spec)
    precision = pub["precision"]
    assert pub["source"]
    if "total" in pub:
        assert _close(counts.total, pub["total"], precision), (counts.total, pub)
    if "active" in pub:
        active = counts.active
        if pub["active_convention"] == "excluding the input embedding":
            active -= counts.input_embedding
        assert _close(active, pub["active"], precision), (active, pub)
    if "non_embedding" in pub:
        assert _close(counts.non_embedding, pub["non_embedding"], precision), (
            counts.non_embedding,
            pub,
        )
    if "embedding" in pub:
        assert _close(counts.embedding, pub["embedding"], precision)
    if "vision" in pub:
        assert abs(counts.vision - pub["vision"]) <= 0.02 * pub["vision"]  # towers are estimated


def test_llama_8b_is_exact(catalog_model):
    assert count_params(catalog_model("meta-llama/Llama-3.1-8B").spec).total == 8_030_261_248


def test_find_gpu_reads_one_table_and_agrees_with_the_full_catalog():
    """A plan's cold start parses only the GPU's own table: every name and alias in the
    catalog finds the same GpuSpec that way as through the fully parsed catalog, and the
    full catalog is not parsed to do it."""
    import tomllib

    from servefit.adapters.catalog import DATA_DIR, find_gpu, gpu_catalog

    rows = tomllib.loads((DATA_DIR / "gpus.toml").read_text(encoding="utf-8"))["gpu"]
    names = [key for row in rows for key in (row["name"], *row.get("aliases", []))]
    gpu_catalog.cache_clear()
    found = {name: find_gpu(name.upper().replace(" ", "_")) for name in names}
    assert gpu_catalog.cache_info().currsize == 0  # the fast path answered every name
    full = gpu_catalog()
    assert all(found[name] == full.get(name) for name in names)
    assert len({g.name for g in found.values()}) == len(rows)


def test_find_gpu_unknown_name_still_gets_suggestions():
    from servefit.adapters.catalog import find_gpu
    from servefit.errors import UnknownGpuError

    with pytest.raises(UnknownGpuError, match=r"Did you mean: .*H100"):
        find_gpu("H100-SXN")
