"""The README and docs/: the README stays short and links every page, every
page starts with its summary and a link back, every relative link (and
#anchor) resolves, and every repository path the text names in backticks
exists, so a moved or deleted file shows up here instead of in a reader's
dead end."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 300

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
TOP_DIRS = ("codegen", "firmware", "boards", "templates", "cmake", "tests", "scripts", "examples", "models", "docs")
REPO_PATH = re.compile(r"`((?:%s)/[^`\s]*)`" % "|".join(TOP_DIRS))


def prose(path: Path) -> str:
    """The page without its fenced code blocks (commands and output, not links)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path).splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            out.add(s if n == 0 else f"{s}-{n}")
            seen[s] = n + 1
    return out


def rel(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def test_the_readme_is_at_most_300_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md is {n} lines: move topics to docs/"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_resolves(page):
    bad = []
    for target in LINK.findall(prose(page)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page.resolve()
        if not dest.is_relative_to(ROOT):
            bad.append(f"{target}: outside the repository")
            continue
        if not dest.exists():
            bad.append(f"{target}: no such file")
            continue
        if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: no heading #{fragment} in {rel(dest)}")
    assert not bad, f"{rel(page)}: " + "; ".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_repository_path_named_exists(page):
    missing = []
    for path in REPO_PATH.findall(prose(page)):
        path = path.rstrip(".,;:)")
        if any(c in path for c in "<>*{}") or "..." in path:
            continue  # a pattern (boards/<name>/, tests/host/test_topk_*.py), not a path
        if not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"{rel(page)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", DOCS, ids=rel)
def test_each_page_starts_with_a_summary_and_a_link_back(page):
    lines = page.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# "), f"{rel(page)} starts with its title"
    head = "\n".join(lines[1:6])
    assert "(../README.md)" in head, f"{rel(page)}: the summary under the title links back to the README"


def test_the_readme_links_every_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(prose(README))}
    unlinked = [rel(p) for p in DOCS if p.resolve() not in linked]
    assert not unlinked, f"README.md links no {unlinked}"
