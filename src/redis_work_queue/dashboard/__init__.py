"""``rwq dashboard``: a web page to watch queues and, when enabled, act on them.

It needs the ``dashboard`` extra (``pip install 'redis-work-queue[dashboard]'``): Starlette and
Jinja2 for the application, uvicorn to serve it. Everything the page loads ships in this package
(``templates/``, ``static/``): no build step, nothing fetched from elsewhere.
"""

from __future__ import annotations

from .app import DashboardSettings, create_app
from .serve import serve

__all__ = ["DashboardSettings", "create_app", "serve"]
