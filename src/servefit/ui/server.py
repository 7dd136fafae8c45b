"""``servefit ui``'s HTTP server (aiohttp): the page's three static files, shipped in the
package, and a small JSON API over :mod:`servefit.ui.views`.

========================  ====================================================================
route                     answer
========================  ====================================================================
``GET /``                 the page (``static/index.html``); its state is the query string
``GET /static/{name}``    ``app.js``, ``app.css`` (only the files the package ships)
``GET /api/catalog``      model ids, GPU names, registered runs
``GET /api/capacity``     the plan without the serving simulation (milliseconds)
``GET /api/plan``         the plan view (``plan`` = ``servefit plan --json``'s document)
``GET /api/plan.json``    the export: ``servefit plan --json`` for the same flags
``GET /api/report.html``  the export: ``servefit report --format html`` (``run=ID``: with it)
``GET /api/compare``      ``servefit compare --json`` (``compare-models``, ``compare-gpus``)
``GET /api/fit``          ``servefit fit --json`` (``fit-gpu``, ``fit-task``, ``fit-search``...)
``GET /api/history``      the run history's runs (``servefit history``), newest first
``GET /api/history/...``  ``series?key=K``: one deployment's predicted vs measured over time
``POST /api/upload``      a config.json's content, parsed in memory -> ``upload:<id>``
========================  ====================================================================

Every bad input is a 400 whose JSON names the field; a path is never read from a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from servefit.errors import InvalidArgumentError, ServefitError
from servefit.ui.query import FIELDS, FieldError, check_model_name, parse_query
from servefit.ui.views import PageState

STATIC_FILES = {
    "index.html": "text/html",
    "app.js": "text/javascript",
    "app.css": "text/css",
}
# The page's only sources are this server; nothing it loads comes from elsewhere.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; base-uri 'none'; form-action 'none'"
)
# The report is a self-contained document with its own <style>; it runs no script.
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'"
STATE_KEY = web.AppKey("state", PageState)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def is_loopback(host: str) -> bool:
    import ipaddress

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _static(name: str) -> bytes:
    return resources.files("servefit.ui").joinpath("static", name).read_bytes()


def _field_of(error: ServefitError) -> str:
    """The field an error is about: its own, or the first flag its message names."""
    from servefit.errors import ConfigError, ModelNotFoundError, UnknownGpuError

    if isinstance(error, FieldError):
        return error.field
    if isinstance(error, UnknownGpuError):
        return "gpu"
    if isinstance(error, ModelNotFoundError | ConfigError):
        return "model"
    for flag in re.findall(r"--([a-z][a-z0-9-]*)", str(error)):
        if flag in FIELDS:
            return flag
    return ""


def _bad_request(error: ServefitError) -> web.Response:
    return web.json_response(
        {"error": str(error), "field": _field_of(error), "label": error.label}, status=400
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_TEXT_TYPES = ("application/json", "text/")


def _redact_body(response: web.StreamResponse) -> None:
    """Every answer of the API (JSON, the report's HTML, the plan's export) through the one
    redaction: a registered run folder or a history row could quote a secret."""
    from servefit.adapters.redact import redact_text

    if not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return
    if not response.content_type.startswith(_TEXT_TYPES):
        return
    text = response.body.decode(response.charset or "utf-8", errors="replace")
    redacted = redact_text(text)
    if redacted != text:
        response.body = redacted.encode(response.charset or "utf-8")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except ServefitError as error:
        response = _bad_request(error)
    if request.path != "/" and not request.path.startswith("/static/"):
        _redact_body(response)  # the page's own files hold no secret; answers might
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Cache-Control", "no-store")
    return response


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Planning is CPU work: off the event loop, so the page's other requests still answer."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _query(request: web.Request, *, extra: Sequence[str] = ()) -> Any:
    keys = [k for k in request.query if k not in extra]
    if len(keys) != len(set(keys)):
        raise FieldError("query", "a field is given twice")
    return parse_query({k: request.query[k] for k in keys}, page_keys=True)


async def index(request: web.Request) -> web.Response:
    return web.Response(body=_static("index.html"), content_type="text/html", charset="utf-8")


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in STATIC_FILES:
        raise web.HTTPNotFound()
    return web.Response(body=_static(name), content_type=STATIC_FILES[name], charset="utf-8")


async def catalog(request: web.Request) -> web.Response:
    from servefit.adapters.catalog import gpu_catalog, model_ids

    state = request.app[STATE_KEY]
    gpus = [
        {"name": g.name, "memory_bytes": g.memory_bytes, "provisional": g.is_provisional}
        for g in gpu_catalog().gpus
    ]
    runs = [run.describe() for run in state.runs.values()]
    return web.json_response({"models": list(model_ids()), "gpus": gpus, "runs": runs})


async def plan(request: web.Request) -> web.Response:
    from servefit.ui.views import plan_view

    q = _query(request)
    return web.json_response(await _in_thread(plan_view, request.app[STATE_KEY], q))


async def capacity(request: web.Request) -> web.Response:
    from servefit.ui.views import capacity_view

    q = _query(request)
    return web.json_response(await _in_thread(capacity_view, request.app[STATE_KEY], q))


async def plan_export(request: web.Request) -> web.Response:
    from servefit.ui.views import plan_json, report_for

    q = _query(request)
    report = await _in_thread(report_for, request.app[STATE_KEY], q)
    return web.Response(
        text=plan_json(report),
        content_type="application/json",
        headers={"Content-Disposition": 'attachment; filename="servefit-plan.json"'},
    )


async def report_export(request: web.Request) -> web.Response:
    from servefit.ui.views import report_for, report_html, run_report_html

    state = request.app[STATE_KEY]
    run_id = request.query.get("run", "")
    q = _query(request, extra=("download",))
    if run_id:
        html = await _in_thread(run_report_html, state, q, run_id)
    else:
        html = report_html(await _in_thread(report_for, state, q))
    headers = {"Content-Security-Policy": REPORT_CSP}
    if request.query.get("download") is not None:
        headers["Content-Disposition"] = 'attachment; filename="servefit-report.html"'
    return web.Response(text=html, content_type="text/html", headers=headers)


async def compare(request: web.Request) -> web.Response:
    from servefit.ui.views import compare_view

    q_params = dict(request.query)
    models = q_params.pop("compare-models", "")
    gpus = q_params.pop("compare-gpus", "")
    if not models.strip() or not gpus.strip():
        raise FieldError("compare-models" if not models.strip() else "compare-gpus", "is empty")
    for model in models.split(","):  # checked as the list's entries before the query's model
        if model.strip():
            check_model_name(model.strip(), "compare-models")
    q_params.setdefault("model", models.split(",")[0].strip() or "-")
    q_params.setdefault("gpu", gpus.split(",")[0].strip() or "-")
    q = parse_query(q_params, page_keys=True)
    doc = await _in_thread(compare_view, request.app[STATE_KEY], q, models, gpus)
    return web.json_response(doc)


async def fit(request: web.Request) -> web.Response:
    from servefit.ui.views import fit_view

    params = dict(request.query)
    if len(params) != len(list(request.query.keys())):
        raise FieldError("query", "a field is given twice")
    return web.json_response(await _in_thread(fit_view, params))


async def upload(request: web.Request) -> web.Response:
    from servefit.ui.views import MAX_UPLOAD_BYTES

    if request.content_length is not None and request.content_length > MAX_UPLOAD_BYTES:
        raise FieldError("config", "too large for a config.json")
    data = await request.content.read(MAX_UPLOAD_BYTES + 1)
    name = request.query.get("name", "config.json")
    model_id = request.app[STATE_KEY].upload(data, name)
    loaded = request.app[STATE_KEY].uploads[model_id.split(":", 1)[1]]
    return web.json_response({"model": model_id, "name": loaded.spec.name})


async def history(request: web.Request) -> web.Response:
    from servefit.ui.history import history_runs

    db = request.app[STATE_KEY].history_db
    runs = await _in_thread(history_runs, db)
    return web.json_response({"runs": runs, "enabled": db is not None})


async def history_series(request: web.Request) -> web.Response:
    from servefit.ui.history import series_view

    db = request.app[STATE_KEY].history_db
    key = request.query.get("key", "")
    return web.json_response(await _in_thread(series_view, db, key))


def make_app(runs: Sequence[Path] = (), history_db: Path | None = None) -> web.Application:
    """The page's application; ``runs`` are the folders registered on the command line,
    ``history_db`` the run history whose runs it lists (and whose run folders it opens)."""
    from servefit.ui.views import MAX_UPLOAD_BYTES

    app = web.Application(middlewares=[_errors], client_max_size=MAX_UPLOAD_BYTES + 1024)
    state = PageState(history_db=history_db)
    for path in runs:
        state.register_run(path)
    app[STATE_KEY] = state
    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/api/catalog", catalog)
    app.router.add_get("/api/capacity", capacity)
    app.router.add_get("/api/plan", plan)
    app.router.add_get("/api/plan.json", plan_export)
    app.router.add_get("/api/report.html", report_export)
    app.router.add_get("/api/compare", compare)
    app.router.add_get("/api/fit", fit)
    app.router.add_get("/api/history", history)
    app.router.add_get("/api/history/series", history_series)
    app.router.add_post("/api/upload", upload)
    return app


def page_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve(app: web.Application, host: str, port: int, on_listening: Callable[[str], None]) -> None:
    """Serve ``app`` until SIGINT or SIGTERM; ``on_listening`` gets the page's URL once the
    socket is bound, with the port the OS gave where ``port`` is 0. A port that cannot be
    bound is an :class:`InvalidArgumentError` naming it."""
    import signal

    async def main() -> None:
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            try:
                await site.start()
            except OSError as error:
                raise InvalidArgumentError(
                    f"--host {host} --port {port}: cannot listen there "
                    f"({error.strerror or error}); choose another port (0: any free one)"
                ) from None
            on_listening(page_url(host, runner.addresses[0][1]))
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
