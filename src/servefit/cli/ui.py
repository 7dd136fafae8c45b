"""``servefit ui``: the local web page (plan, compare, runs) over the application layer."""

from __future__ import annotations

from pathlib import Path

import click

from servefit.cli.output import fail
from servefit.errors import InvalidArgumentError, ServefitError


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.option(
    "--run",
    "runs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A `servefit bench --output` or `servefit up` run folder the page may open "
    "(repeatable); besides these it opens only the run folders the run history recorded.",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    help="The run history to list [SERVEFIT_DB, else the user's data directory].",
)
@click.option("--no-history", is_flag=True, help="List no run history.")
def ui(
    host: str,
    port: int,
    open_browser: bool,
    runs: tuple[str, ...],
    db: str | None,
    no_history: bool,
) -> None:
    """Serve the page: pick a model, GPU, vLLM flags and workload, and watch the verdict,
    memory, speed and cost move; compare deployments; open a run's report. Every state is a
    URL; the page loads nothing from the network."""
    from servefit.ui.server import is_loopback, make_app, serve

    folders = []
    for run in runs:
        path = Path(run).expanduser().resolve()
        if not path.is_dir():
            fail(InvalidArgumentError(f"--run {run}: not a folder"))
        folders.append(path)
    if not is_loopback(host):
        click.echo(
            f"warning: --host {host} is not loopback: anyone who can reach this machine on port "
            f"{port} can use the page and read the registered runs' reports",
            err=True,
        )
    history_db = None
    if not no_history:
        from servefit.app.history import resolve_db_path

        history_db = resolve_db_path(db)
    app = make_app(folders, history_db)

    def on_listening(url: str) -> None:  # the port the OS gave, where --port 0 asked it to
        click.echo(f"servefit ui: {url} (Ctrl-C stops it)", err=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    try:
        serve(app, host, port, on_listening)
    except ServefitError as error:
        fail(error)
