"""The pages a newcomer follows run as written: every Python block and ``rwq`` command of
``docs/getting-started.md`` (its step-by-step section) and the first example of
``docs/spark.md``, in order, against a real Redis.

The collector is small and kept here: a fenced ``python`` block whose first line is
``# NAME.py`` is saved as that file (the page tells the reader to save it); any other Python
block runs in the page's one namespace, in the page's directory; a block that calls
``.run()`` on a worker runs as its own script (it works until stopped) and is stopped with
SIGTERM once it has started. A ``sh`` block's ``rwq`` lines run as commands: ``rwq worker``
until the queue is drained, then SIGTERM; ``rwq dashboard`` until its page answers. The URL
``redis://localhost:6379/0`` the pages name is replaced by the test server's, and the Spark
example's relative paths by paths in the test's directory (Spark's JVM resolves them against
its own working directory).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from servers import free_port, poll
from test_spark import spark as _spark_session  # noqa: F401 (the session fixture)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE_URL = "redis://localhost:6379/0"
BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
WAIT = 60.0


@dataclass
class Block:
    """One fenced code block of a page."""

    lang: str
    code: str
    line: int

    @property
    def saved_as(self) -> str | None:
        """The file the page says to save this block as (``# tasks.py``), or None."""
        first = self.code.split("\n", 1)[0].strip()
        match = re.fullmatch(r"#\s*([\w./-]+\.py)", first)
        return match.group(1) if match else None

    @property
    def runs_until_stopped(self) -> bool:
        """A block that starts a worker: it runs until a signal stops it."""
        return bool(re.search(r"^\w+\.run\(\)", self.code, re.MULTILINE))


def blocks(page: Path, start: str | None = None, end: str | None = None) -> list[Block]:
    """The fenced blocks of ``page`` between the headings ``start`` and ``end`` (exclusive)."""
    text = page.read_text("utf-8")
    lo = text.index(start) if start else 0
    hi = text.index(end, lo) if end else len(text)
    found = []
    for match in BLOCK.finditer(text, lo, hi):
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(match.group(1), match.group(2), line))
    return found


def python_env(workdir: Path) -> dict[str, str]:
    """The environment of the commands: the package's source and the page's directory (the
    page's ``export`` lines add to it)."""
    paths = [str(workdir), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    bin_dir = str(Path(sys.executable).parent)
    outside = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}  # the page sets it
    return {
        **outside,
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
    }


def rwq_argv(line: str) -> list[str]:
    """A page's ``rwq ...`` line as the argv of this checkout's ``rwq``."""
    words = shlex.split(line)
    assert words[0] == "rwq", line
    return [
        sys.executable,
        "-c",
        "import sys; from redis_work_queue.cli import main; sys.exit(main())",
        *words[1:],
    ]


def stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    """SIGTERM ``proc``; its exit code and output."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=WAIT)
    return proc.returncode, out, err


class PageRun:
    """Runs one page's blocks in order, in ``workdir``, against ``redis_url``."""

    def __init__(self, page: Path, workdir: Path, redis_url: str, db: redis.Redis) -> None:
        self.page = page
        self.workdir = workdir
        self.redis_url = redis_url
        self.db = db
        self.namespace: dict[str, Any] = {"__name__": "__docs__"}
        self.env = python_env(workdir)
        self.outputs: list[str] = []

    def where(self, block: Block) -> str:
        return f"{self.page.relative_to(ROOT)}:{block.line}"

    def run(self, block: Block, paths: tuple[str, ...] = ()) -> None:
        code = block.code.replace(PAGE_URL, self.redis_url)
        for path in paths:  # relative to the JVM's directory, which is not the test's
            code = code.replace(f'"{path}"', repr(str(self.workdir / path)))
        if block.lang == "python" and block.saved_as:
            (self.workdir / block.saved_as).write_text(code, "utf-8")
        elif block.lang == "python" and block.runs_until_stopped:
            self.run_worker_script(block, code)
        elif block.lang == "python":
            self.exec_block(block, code)
        elif block.lang == "sh":
            for line in code.splitlines():
                command = line.split("#", 1)[0].strip()
                if command.startswith("export "):
                    name, _, value = command.removeprefix("export ").partition("=")
                    self.env[name] = value
                elif command.startswith("rwq "):
                    self.run_rwq(block, command)

    def exec_block(self, block: Block, code: str) -> None:
        out = io.StringIO()
        cwd = Path.cwd()
        sys.path.insert(0, str(self.workdir))
        os.chdir(self.workdir)
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, self.where(block), "exec"), self.namespace)
        finally:
            os.chdir(cwd)
            sys.path.remove(str(self.workdir))
        self.outputs.append(out.getvalue())

    def run_worker_script(self, block: Block, code: str) -> None:
        script = self.workdir / f"block_{block.line}.py"
        script.write_text(code, "utf-8")
        proc = subprocess.Popen(
            [sys.executable, str(script)],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            poll(lambda: self.db.exists("resize:workers"), WAIT, "the worker's registration")
        finally:
            code_, _out, err = stop(proc)
        assert code_ == 0, f"{self.where(block)} exited {code_}:\n{err[-3000:]}"
        assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ INFO .*worker .* started", err, re.M)
        assert " stopped: completed" in err, err[-3000:]

    def run_rwq(self, block: Block, command: str) -> None:
        argv = rwq_argv(command)
        words = argv[3:]
        if words[0] == "worker":
            self.run_rwq_worker(block, argv)
        elif words[0] == "dashboard":
            port = free_port()
            proc = subprocess.Popen(
                [*argv, "--port", str(port)],
                cwd=self.workdir,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                page = poll(
                    lambda: httpx.get(f"http://127.0.0.1:{port}/", timeout=2),
                    WAIT,
                    "the dashboard's page",
                    0.2,
                    not_yet=(httpx.HTTPError,),
                )
                assert page.status_code == 200
            finally:
                code_, _out, err = stop(proc)
            assert code_ == 0, err[-3000:]
        else:
            done = subprocess.run(
                argv,
                cwd=self.workdir,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=WAIT,
                check=False,
            )
            assert done.returncode == 0, f"{self.where(block)} {command}: {done.stderr}"
            self.outputs.append(done.stdout)

    def run_rwq_worker(self, block: Block, argv: list[str]) -> None:
        name = argv[5]  # rwq worker HANDLER QUEUE ...
        proc = subprocess.Popen(
            argv,
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            poll(
                lambda: (
                    self.db.llen(f"{name}:queue") == 0 and self.db.llen(f"{name}:processing") == 0
                ),
                WAIT,
                f"{name}'s worker to drain the queue",
            )
        finally:
            code_, out, err = stop(proc)
        assert code_ == 0, f"{self.where(block)} exited {code_}:\n{err[-3000:]}"
        assert "started: queues resize, concurrency 4, threads" in err, err
        assert "stopped: completed 102, failed 0" in err, err
        self.outputs.append(out)


def test_getting_started_runs_as_written(
    redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    page = DOCS / "getting-started.md"
    run = PageRun(page, tmp_path, redis_url, real_db)
    found = blocks(page, "## Your first queue", "## Running the tests")
    assert [b.lang for b in found] == ["python", "python", "sh", "sh", "python", "python", "python"]
    for block in found:
        run.run(block)
    joined = "\n".join(run.outputs)
    assert "True False" in joined
    assert "queued=102" in joined and "delayed=1" in joined
    assert "resize" in joined  # rwq info's table
    assert not real_db.keys("resize:*")  # the page cleans up after itself


@pytest.mark.spark
@pytest.mark.slow
def test_the_first_spark_example_runs_as_written(
    _spark_session: Any,  # noqa: F811 (the fixture imported above)
    redis_url: str,
    real_db: redis.Redis,
    tmp_path: Path,
) -> None:
    spark = _spark_session
    page = DOCS / "spark.md"
    run = PageRun(page, tmp_path, redis_url, real_db)
    (block,) = blocks(page, "## A worked pipeline", "## Choosing ids")
    assert "local[*]" in block.code
    run.run(block, paths=("thumbnails", "checkpoints/thumbs"))
    out = run.outputs[-1]
    assert "WriteReport(added=3, existing=0" in out
    assert out.strip().endswith("3")
    assert real_db.llen("thumbs:queue") == 0 and real_db.llen("thumbs:processing") == 0
    rows = spark.read.parquet(str(tmp_path / "thumbnails")).collect()
    assert sorted(r.thumbnail for r in rows) == [
        "uploads/cat.png at 640 px",
        "uploads/dog.png at 640 px",
        "uploads/owl.png at 320 px",
    ]
