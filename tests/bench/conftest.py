"""A real null server on a free loopback port, started once per module."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web

from servefit.bench.null_server import NullServer, NullServerConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """Runs a NullServer in its own event loop thread."""

    def __init__(self, config: NullServerConfig, server: NullServer | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = server if server is not None else NullServer(config)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self.server.app, access_log=None, shutdown_timeout=0.5)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        self._loop.run_until_complete(site.start())
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(120):  # a guard against a hang: returns once it listens
            raise RuntimeError("the null server thread did not start listening")
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            await self._runner.cleanup()

        fut = asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def null_server() -> Iterator[ServerThread]:
    server = ServerThread(NullServerConfig(ttft_s=0.02, itl_s=0.005, output_len=16)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def instant_server() -> Iterator[ServerThread]:
    server = ServerThread(NullServerConfig()).start()
    yield server
    server.stop()
