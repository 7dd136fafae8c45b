"""``servefit bench``: measure an OpenAI-compatible server.

Kept apart, as in guidellm: *when* to send (:mod:`.schedules`), *what* to send
(:mod:`.workloads`), *how* to send (:mod:`.client`). :mod:`.runner` joins them and writes
every finished request as it completes; :mod:`.metrics` turns raw timestamps into the
numbers defined in ``docs/metrics.md``.
"""
