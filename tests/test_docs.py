"""The documentation: the site builds with warnings as errors, and every link resolves.

``mkdocs build --strict`` fails on a broken link or anchor, a page missing from the nav, and a
docstring mkdocstrings cannot parse. The link checks need no build: every relative link in
``docs/`` names a file that exists, and every link of the README into the repository names a
file of this checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REPO_URL = "https://github.com/redis-work-queue/redis-work-queue"
#: A Markdown link or image target: ``[text](target)`` (no spaces in targets here).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text("utf-8"))  # code blocks hold no links
    text = re.sub(r"`[^`\n]*`", "", text)  # nor do code spans
    return LINK.findall(text)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_every_relative_link_in_docs_resolves() -> None:
    broken = []
    checked = 0
    for page in pages():
        for target in links(page):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            checked += 1
            path = target.split("#", 1)[0]
            if not (page.parent / path).resolve().exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert checked > 20, "the link pattern found almost no links"
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_links_into_this_repository_by_absolute_urls_that_exist() -> None:
    targets = links(ROOT / "README.md")
    relative = [t for t in targets if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]
    assert not relative, f"the README is shown outside the repository: {relative}"
    ours = [t for t in targets if t.startswith(REPO_URL + "/blob/main/")]
    assert len(ours) >= 10
    missing = []
    for target in ours:
        path, _, anchor = target.removeprefix(REPO_URL + "/blob/main/").partition("#")
        if not (ROOT / path).exists() or (anchor and anchor not in slugs(ROOT / path)):
            missing.append(target)
    assert not missing, f"README links to files or headings that do not exist: {missing}"


def slugs(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub and MkDocs make them."""
    text = FENCE.sub("", path.read_text("utf-8"))
    titles = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", t.lower()).strip().replace(" ", "-") for t in titles}


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text("utf-8")
    for page in pages():
        assert page.relative_to(DOCS).as_posix() in nav, f"{page} is not in mkdocs.yml's nav"


def test_no_page_mentions_the_other_distribution_as_the_install_command() -> None:
    for path in [ROOT / "README.md", *pages()]:
        text = path.read_text("utf-8")
        assert not re.search(r"pip install '?redis-work-queue(\[|'|\s|$)", text), path


@pytest.mark.slow
def test_the_site_builds_strict_and_loads_nothing_from_elsewhere(tmp_path: Path) -> None:
    try:
        import mkdocs  # noqa: F401, PLC0415 (the docs extra)
    except ImportError:
        why = "the docs build needs the docs extra: pip install -e '.[docs]'"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "WARNING" not in done.stderr, done.stderr[-5000:]
    html = {p: p.read_text("utf-8") for p in site.rglob("*.html")}
    assert (site / "reference" / "queues" / "index.html").exists()
    assert "WorkQueue" in html[site / "reference" / "queues" / "index.html"]
    for path, text in html.items():
        # Scripts, styles and fonts come from the site itself.
        tags = re.findall(r"<(?:script|link)\b[^>]*>", text)
        loads = [t for t in tags if 'rel="canonical"' not in t]
        outside = [u for t in loads for u in re.findall(r'(?:src|href)="(https?:[^"]+)"', t)]
        outside = [u for u in outside if not u.startswith(REPO_URL)]
        assert not outside, f"{path} loads {outside}"
    queue_page = html[site / "queue" / "index.html"]
    assert 'class="mermaid"' in queue_page
    assert "assets/javascripts/mermaid/mermaid.min.js" in queue_page
    assert (site / "assets" / "javascripts" / "mermaid" / "mermaid.min.js").stat().st_size > 10**6
