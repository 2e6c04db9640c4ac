"""Real packaging: build the wheel, install it in a fresh venv, and use it from outside the
source tree, so only the Lua scripts shipped inside the wheel can be found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from plugins.backends import Backend

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

SMOKE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import redis
    import redis_work_queue
    from redis_work_queue import Item, KeyPrefix, WorkQueue, loader

    package = Path(redis_work_queue.__file__).resolve()
    lua_dir = loader.lua_dir().resolve()
    queue = WorkQueue(KeyPrefix("wheel:{smoke}"))
    db = redis.Redis.from_url(sys.argv[1])
    added = queue.add_item(db, Item(b"from the wheel\\x00", id="w1"))
    item = queue.lease(db, 30, block=False)
    leased = None if item is None else [item.id(), item.data().decode("latin-1")]
    completed = queue.complete(db, item)
    print(json.dumps({
        "package": str(package),
        "lua_dir": str(lua_dir),
        "prefix": sys.prefix,
        "added": added,
        "leased": leased,
        "completed": completed,
        "left": sorted(k.decode() for k in db.keys("*")),
    }))
    """
)


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, (
        f"{args} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


def test_wheel_installs_and_works_outside_the_source_tree(
    tmp_path: Path, real_backend: Backend
) -> None:
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(REPO_ROOT)],
        cwd=tmp_path,
        timeout=300,
    )
    # The distribution is redis-work-queue-lua (redis-work-queue on the public index is the
    # reference design's own client); the import name stays redis_work_queue.
    (wheel,) = dist.glob("redis_work_queue_lua-*.whl")

    names = set(zipfile.ZipFile(wheel).namelist())
    (metadata_name,) = (n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(metadata_name).decode("utf-8").split("\n\n", 1)[0]
    fields = [line.partition(": ") for line in metadata.splitlines()]
    assert ("Name", ": ", "redis-work-queue-lua") in fields
    assert ("License-Expression", ": ", "MIT") in fields
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    urls = {value.partition(", ")[0] for key, _, value in fields if key == "Project-URL"}
    assert {"Homepage", "Documentation", "Source", "Changelog"} <= urls
    classifiers = {value for key, _, value in fields if key == "Classifier"}
    assert "Programming Language :: Python :: 3.10" in classifiers
    assert any(key == "Author" for key, _, _ in fields)
    shipped = {
        f"redis_work_queue/lua/{path.relative_to(REPO_ROOT / 'lua').as_posix()}"
        for path in (REPO_ROOT / "lua").rglob("*.lua")
    }
    assert shipped, "no Lua scripts in the source tree?"
    assert "redis_work_queue/lua/include/queue.lua" in shipped
    missing = shipped - names
    assert not missing, f"Lua scripts missing from the wheel: {sorted(missing)}"
    assert "redis_work_queue/py.typed" in names

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, timeout=120)
    python = venv / "bin" / "python"
    _run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        cwd=tmp_path,
        timeout=300,
    )

    smoke = tmp_path / "smoke.py"
    smoke.write_text(SMOKE, encoding="utf-8")
    result = _run([str(python), str(smoke), real_backend.url], cwd=tmp_path, timeout=60)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    installed_prefix = Path(report["prefix"]).resolve()
    assert installed_prefix == venv.resolve()
    assert Path(report["package"]).is_relative_to(installed_prefix)
    assert not Path(report["package"]).is_relative_to(REPO_ROOT)
    assert Path(report["lua_dir"]).is_relative_to(installed_prefix)
    assert report["added"] is True
    assert report["leased"] == ["w1", "from the wheel\x00"]
    assert report["completed"] is True
    assert report["left"] == ["wheel:{smoke}:counts"]  # the counters outlive the item
