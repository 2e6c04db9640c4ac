"""The reference Node.js client, built from source for the interop suite
(``test_interop_node.py``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]

#: Where the reference clients' source lives: beside the repository (``../shared``), or where
#: RWQ_REFERENCE_NODE points.
REFERENCE_NODE_CANDIDATES = (
    TESTS_DIR.parent.parent / "shared" / "peers" / "mevitae" / "node",
    Path("/work/shared/peers/mevitae/node"),
)
NODE_BUILD_DEADLINE_SECS = 600


def _skip_or_fail(reason: str) -> None:
    """Skip a ``node`` test, or fail it under CI=true (CI must run the interop suite)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI requires the Node.js interop suite", pytrace=False)
    pytest.skip(f"{reason} (deselect with -m 'not node')")


def _reference_node_source() -> Path | None:
    configured = os.environ.get("RWQ_REFERENCE_NODE")
    candidates = (Path(configured),) if configured else REFERENCE_NODE_CANDIDATES
    for candidate in candidates:
        if (candidate / "package.json").is_file() and (candidate / "src").is_dir():
            return candidate
    return None


def _source_digest(source: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(source.rglob("*")):
        if path.is_file() and "node_modules" not in path.parts and "dist" not in path.parts:
            digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    digest.update(shutil.which("node").encode() if shutil.which("node") else b"")
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def reference_node(request: pytest.FixtureRequest) -> Path:
    """A build of the reference Node.js client: a directory with ``dist/`` and ``node_modules/``.

    The source is copied out (never built in place), installed with ``npm ci`` (its lock file)
    and compiled with ``npx tsc``, under the pytest cache (or the temp dir, without one) keyed
    by the source's hash, so later runs reuse it.
    """
    node, npm, npx = (shutil.which(name) for name in ("node", "npm", "npx"))
    if node is None or npm is None or npx is None:
        _skip_or_fail("node, npm or npx not found on PATH")
    source = _reference_node_source()
    if source is None:
        _skip_or_fail("the reference Node.js client's source was not found")
    assert source is not None and npm is not None and npx is not None
    cache = getattr(request.config, "cache", None)  # None with -p no:cacheprovider
    if cache is not None:
        cache_root = Path(cache.mkdir("reference-node"))
    else:
        cache_root = Path(tempfile.gettempdir()) / "rwq-reference-node"
        cache_root.mkdir(exist_ok=True)
    build = cache_root / _source_digest(source)
    if (build / "dist" / "WorkQueue.js").is_file():
        return build
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=cache_root))
    try:
        shutil.copytree(
            source,
            staging,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("dist", "node_modules"),
        )
        env = {**os.environ, "npm_config_audit": "false", "npm_config_fund": "false"}
        for command in (
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
            [npx, "--no-install", "tsc"],
        ):
            done = subprocess.run(
                command,
                cwd=staging,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=NODE_BUILD_DEADLINE_SECS,
                check=False,
            )
            if done.returncode != 0:
                pytest.fail(
                    f"building the reference Node.js client failed: {' '.join(command)}:\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
                    pytrace=False,
                )
        with contextlib.suppress(OSError):  # another run finished the same build first
            staging.rename(build)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    assert (build / "dist" / "WorkQueue.js").is_file()
    return build
