"""``servefit bench``: measure an OpenAI-compatible server.

Kept apart, as in guidellm: *when* to send (:mod:`.schedules`), *what* to send
(:mod:`.workloads`), *how* to send (:mod:`.client`). :mod:`.config` turns the command
line's spellings (base URLs, SLOs in ms, load levels) into a run's configuration;
:mod:`.dispatch` sends on schedule (in this process or in :mod:`.workers`); :mod:`.runner`
joins them and writes every finished request as it completes; :mod:`.search` sweeps load
levels and searches for the highest that meets the SLOs; :mod:`.metrics` turns raw
timestamps into the numbers defined in ``docs/metrics.md``, by the simulator's own formulas
(:mod:`servefit.core.metrics`).
"""
