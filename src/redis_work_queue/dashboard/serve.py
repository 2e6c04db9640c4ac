"""Serve the dashboard with uvicorn until interrupted."""

from __future__ import annotations

import uvicorn

from .app import DashboardSettings, create_app


def serve(settings: DashboardSettings, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve the dashboard on ``host``:``port`` until SIGINT or SIGTERM.

    Args:
        settings: How the dashboard runs.
        host: The address to bind (loopback by default: expose it on purpose only).
        port: The TCP port.
    """
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    uvicorn.Server(config).run()
