"""The suite's fixtures are plugins (``tests/plugins/``), registered here.

The suite never talks to port 6379: every real server is started by the one launcher,
``servers.py``, on a free port, with persistence switched off, and stopped at teardown.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    # Spawned worker processes import ``workers`` by name; the parent needs it too.
    sys.path.insert(0, str(TESTS_DIR))

pytest_plugins = [
    "plugins.servers",
    "plugins.backends",
    "plugins.queues",
    "plugins.faults",
    "plugins.node",
    "plugins.checks",
]
