"""Search decision logic (a fake server capacity stands in for real runs)."""

import pytest

from servefit.bench.metrics import Distribution, summarize
from servefit.bench.records import RequestRecord
from servefit.bench.search import search_max_concurrency, slo_met
from servefit.core.metrics import Slo


def test_doubles_then_bisects_to_the_boundary():
    capacity = 37
    best, steps = search_max_concurrency(lambda c: c <= capacity)
    assert best == capacity
    tried = [s.concurrency for s in steps]
    assert tried[:7] == [1, 2, 4, 8, 16, 32, 64]  # doubling until 64 fails
    assert len(tried) <= 7 + 5  # then a bisection of [32, 64]


def test_nothing_meets_and_everything_meets():
    assert search_max_concurrency(lambda c: False)[0] is None
    best, steps = search_max_concurrency(lambda c: True, limit=64)
    assert best == 64 and [s.concurrency for s in steps] == [1, 2, 4, 8, 16, 32, 64]


def test_slo_met_uses_the_percentile_and_failures():
    records = [
        RequestRecord(
            request_id=i,
            scheduled_s=0,
            sent_s=0.0,
            chunk_s=[t, t + 0.01],
            done_s=t + 0.01,
            completion_tokens=2,
            outcome="ok",
        )
        for i, t in enumerate([0.1] * 9 + [1.0])
    ]
    s = summarize(records)
    assert slo_met(s, Slo(ttft_ms=200), 50)
    assert not slo_met(s, Slo(ttft_ms=200), 99)
    assert isinstance(s.ttft_s, Distribution)


def _result(successful: int, interrupted: bool = False):
    from servefit.bench.runner import BenchResult

    s = summarize([])
    return BenchResult(
        schema_version=1,
        servefit_version="test",
        config={},
        server={},
        interrupted=interrupted,
        summary=s.model_copy(update={"successful": successful}),
        turns=[],
        server_metrics={},
        server_latency_s={},
        server_peaks={},
        warnings=[],
    )


def _config():
    from servefit.bench.config import BenchConfig
    from servefit.bench.schedules import Schedule
    from servefit.bench.workloads import WorkloadConfig

    return BenchConfig(
        base_urls=("http://127.0.0.1:9/v1",),
        workload=WorkloadConfig(num_requests=1),
        schedule=Schedule(concurrency=1),
    )


def test_a_sweep_keeps_its_levels_when_the_server_goes_away(monkeypatch, tmp_path):
    import json

    import servefit.bench.search as search
    from servefit.bench.config import LoadLevels
    from servefit.errors import ServerError

    tried = []

    def fake_run(cfg, *, api_key, out_dir, interrupt=None):
        tried.append(cfg.schedule.concurrency)
        if cfg.schedule.concurrency == 4:
            raise ServerError("cannot reach http://127.0.0.1:9 (refused)")
        return _result(successful=3)

    monkeypatch.setattr(search, "run", fake_run)
    levels = LoadLevels(concurrencies=(1, 2, 4, 8))
    sweep = search.run_sweep(_config(), levels, api_key=None, out_dir=tmp_path)
    assert tried == [1, 2, 4]  # nothing after the server went away
    assert [lv.concurrency for lv in sweep.levels] == [1, 2]
    assert sweep.warnings == ["stopped after 2 level(s): cannot reach http://127.0.0.1:9 (refused)"]
    assert not sweep.is_complete
    written = json.loads((tmp_path / "sweep.json").read_text())
    assert [lv["concurrency"] for lv in written["levels"]] == [1, 2]
    # a server that is not there at the first level is an error, not an empty sweep
    tried.clear()
    levels = LoadLevels(concurrencies=(4, 8))
    with pytest.raises(ServerError):
        search.run_sweep(_config(), levels, api_key=None, out_dir=None)


def test_an_interrupted_level_ends_the_sweep(monkeypatch):
    import servefit.bench.search as search
    from servefit.bench.config import LoadLevels

    results = iter([_result(3), _result(1, interrupted=True), _result(3)])
    monkeypatch.setattr(search, "run", lambda cfg, **kw: next(results))
    sweep = search.run_sweep(
        _config(), LoadLevels(concurrencies=(1, 2, 4)), api_key=None, out_dir=None
    )
    assert [lv.concurrency for lv in sweep.levels] == [1, 2]
    assert sweep.warnings == ["interrupted: stopped after 2 level(s)"] and not sweep.is_complete


def test_a_sweep_passes_when_every_level_failed_no_more_than_the_max_error_rate(monkeypatch):
    import servefit.bench.search as search
    from servefit.bench.config import LoadLevels

    def level(successful: int, errored: int):
        r = _result(successful)
        return r.model_copy(update={"summary": r.summary.model_copy(update={"errored": errored})})

    monkeypatch.setattr(search, "run", lambda cfg, **kw: next(results))
    results = iter([level(10, 0), level(6, 4)])
    levels = LoadLevels(concurrencies=(1, 2))
    sweep = search.run_sweep(_config(), levels, api_key=None, out_dir=None)
    assert sweep.is_complete and sweep.levels[1].result.failed_fraction == 0.4
    assert not sweep.is_passing() and not sweep.is_passing(0.39) and sweep.is_passing(0.4)


def test_a_signal_between_two_levels_starts_no_further_level(monkeypatch):
    import servefit.bench.search as search
    from servefit.bench.config import LoadLevels
    from servefit.bench.interrupt import Interrupt

    stop = Interrupt()

    def fake_run(cfg, **kw):
        stop.trigger()  # as if SIGINT came once this level was over, before the next began
        return _result(3)

    monkeypatch.setattr(search, "run", fake_run)
    sweep = search.run_sweep(
        _config(), LoadLevels(concurrencies=(1, 2, 4)), api_key=None, out_dir=None, interrupt=stop
    )
    assert [lv.concurrency for lv in sweep.levels] == [1]
    assert sweep.interrupted and sweep.interrupt_signal == "SIGINT" and not sweep.is_passing()
