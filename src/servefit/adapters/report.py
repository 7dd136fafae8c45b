"""``servefit report``: the five-minute checklist -- model, memory, workload, performance,
scaling, economics -- predicted and (when a benchmark ran) measured side by side, with the
diagnosis. Rendered as Markdown (terminals, pull requests) and as one self-contained HTML
file with inline SVG plots (works offline, no scripts).

This module is the front door; the parts live in:

- :mod:`servefit.adapters.report_document`: the document, its sections and builders
  (GPU section, observations, :func:`build_report`, :func:`load_report`);
- :mod:`servefit.adapters.report_bench`: the measured section read from a bench folder
  (a ``--prefix-cache-compare`` run's cold and warm records included);
- :mod:`servefit.adapters.report_rows`: the checklist rows every renderer shares;
- :mod:`servefit.adapters.report_markdown`: the Markdown renderer;
- :mod:`servefit.adapters.report_html`: the HTML renderer (plots via
  :mod:`servefit.adapters.svg`);
- :mod:`servefit.adapters.report_compare`: ``report --compare``.
"""

from __future__ import annotations

# `X as X`: re-exported, so ``servefit.adapters.report.<name>`` keeps working
from servefit.adapters.report_bench import load_bench as load_bench
from servefit.adapters.report_bench import load_groups as load_groups
from servefit.adapters.report_bench import measured_section as measured_section
from servefit.adapters.report_compare import render_compare_html as render_compare_html
from servefit.adapters.report_compare import render_compare_markdown as render_compare_markdown
from servefit.adapters.report_document import MAX_SERIES_POINTS as MAX_SERIES_POINTS
from servefit.adapters.report_document import SCHEMA_VERSION as SCHEMA_VERSION
from servefit.adapters.report_document import FindingSection as FindingSection
from servefit.adapters.report_document import GpuSection as GpuSection
from servefit.adapters.report_document import GpuSeries as GpuSeries
from servefit.adapters.report_document import MeasuredSection as MeasuredSection
from servefit.adapters.report_document import RecordGroup as RecordGroup
from servefit.adapters.report_document import ReportDocument as ReportDocument
from servefit.adapters.report_document import build_report as build_report
from servefit.adapters.report_document import dumps as dumps
from servefit.adapters.report_document import expectations_from as expectations_from
from servefit.adapters.report_document import gpu_section as gpu_section
from servefit.adapters.report_document import load_report as load_report
from servefit.adapters.report_document import observations as observations
from servefit.adapters.report_document import workload_traits as workload_traits
from servefit.adapters.report_html import CSS as CSS
from servefit.adapters.report_html import render_html as render_html
from servefit.adapters.report_markdown import render_markdown as render_markdown
from servefit.adapters.report_rows import GIB as GIB
