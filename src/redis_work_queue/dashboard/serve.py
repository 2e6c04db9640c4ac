"""Serve the dashboard with uvicorn until interrupted."""

from __future__ import annotations

import socket

import uvicorn

from .app import DashboardSettings, create_app


def serve(
    settings: DashboardSettings,
    host: str = "127.0.0.1",
    port: int = 8765,
    sock: socket.socket | None = None,
) -> None:
    """Serve the dashboard on ``host``:``port`` until SIGINT or SIGTERM.

    Args:
        settings: How the dashboard runs.
        host: The address to bind (loopback by default: expose it on purpose only).
        port: The TCP port.
        sock: A listening socket to serve on instead of binding ``host``:``port``.
    """
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    uvicorn.Server(config).run(sockets=None if sock is None else [sock])
