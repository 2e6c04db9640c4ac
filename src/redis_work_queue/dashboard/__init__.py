"""``rwq dashboard``: a web page to watch queues and, when enabled, act on them.

It needs the ``dashboard`` extra (``pip install 'redis-work-queue-lua[dashboard]'``): Starlette and
Jinja2 for the application, uvicorn to serve it. Everything the page loads ships in this package
(``templates/``, ``static/``): no build step, nothing fetched from elsewhere.
"""

from __future__ import annotations

from ..extras import extra_needed

with extra_needed("the dashboard", "dashboard"):
    from .app import DashboardSettings, create_app
    from .serve import serve

__all__ = ["DashboardSettings", "create_app", "serve"]
