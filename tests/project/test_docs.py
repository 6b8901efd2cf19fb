"""The documentation's links and shape (issue 41): a reader who follows a link lands on a file and
heading that exist, the README stays a short front page whose contents list is its headings, and
docs/architecture.md keeps one section per subpackage of webhook/, so a module's page is found by
its name. Anchors are checked with GitHub's heading slugs, since GitHub is where the pages are read."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

# The checkout: the nearest folder above this file with pyproject.toml (tests/ may gain subfolders).
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
README_MAX_LINES = 250

# The pages whose relative links are checked.
DOC_FILES = sorted(
    [
        ROOT / "README.md",
        ROOT / "SECURITY.md",
        ROOT / "benchmarks" / "README.md",
        ROOT / "deploy" / "README.md",
        ROOT / "charts" / "rdma-webhook" / "README.md",
    ]
    + list((ROOT / "docs").glob("*.md"))
)

FENCE = re.compile(r"^\s*(```|~~~)")
ATX_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE_LINK = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+\".*\")?\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks: a `#` or `[x](y)` inside a code block is not markdown."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every ATX heading outside code blocks."""
    found = []
    for line in prose_lines(text):
        match = ATX_HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lower-cased, every character that is not a
    letter, digit, `_`, `-` or space dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__|\*)", "", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page, duplicates numbered as GitHub numbers them (`x`, `x-1`, ...)."""
    seen: dict[str, int] = {}
    result = set()
    for _, heading in headings(text):
        slug = github_slug(heading)
        if slug in seen:
            seen[slug] += 1
            result.add(f"{slug}-{seen[slug]}")
        else:
            seen[slug] = 0
            result.add(slug)
    return result


def links(text: str) -> list[str]:
    """The targets of a page's inline links and reference definitions, outside code."""
    found = []
    for line in prose_lines(text):
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            found.append(definition.group(1))
            continue
        line = CODE_SPAN.sub("code", line)
        found.extend(match.group(2) for match in INLINE_LINK.finditer(line))
    return found


def is_relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def shown(path: Path) -> str:
    """A path as a reader of the repository names it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(page: Path) -> list[str]:
    """Why each relative link of `page` does not resolve: a missing file, or an anchor that is no heading."""
    problems = []
    for target in links(page.read_text()):
        if not is_relative(target):
            continue
        path_part, _, fragment = target.partition("#")
        destination = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not destination.exists():
            problems.append(f"{target}: no file {shown(destination)}")
            continue
        if (
            fragment
            and destination.is_file()
            and destination.suffix == ".md"
            and unquote(fragment).lower() not in anchors(destination.read_text())
        ):
            problems.append(f"{target}: no heading with anchor #{fragment} in {shown(destination)}")
    return problems


@pytest.mark.parametrize("page", DOC_FILES, ids=[str(p.relative_to(ROOT)) for p in DOC_FILES])
def test_relative_links_resolve(page):
    assert page.exists(), page
    assert broken_links(page) == []


def test_the_pages_checked_include_the_docs_folder():
    assert len([p for p in DOC_FILES if p.parent == ROOT / "docs"]) >= 5


def test_readme_is_a_short_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_contents_list_matches_its_headings():
    """The list under `## Contents` links every `##` heading of the README, in order, and nothing else."""
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    start = lines.index("## Contents")
    entries = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        match = re.match(r"^\s*[-*]\s+\[([^\]]+)\]\(#([^)]+)\)\s*$", line)
        if match:
            entries.append((match.group(1), match.group(2)))
    sections = [heading for level, heading in headings(text) if level == 2 and heading != "Contents"]
    assert [name for name, _ in entries] == sections
    assert [anchor for _, anchor in entries] == [github_slug(heading) for heading in sections]


def test_readme_keeps_the_three_commands():
    """CI (.ci/run) runs the README's commands; a new user reads them first."""
    text = (ROOT / "README.md").read_text()
    for command in ("make run", "make test", "make e2e"):
        assert re.search(rf"^{command}\s", text, re.MULTILINE), command


def test_architecture_has_a_section_per_subpackage():
    """docs/architecture.md names each webhook/ subpackage in a heading, lowest layer first as
    webhook.LAYERS orders them, and no subpackage that is gone."""
    import webhook

    packages = sorted(p.name for p in (ROOT / "webhook").iterdir() if (p / "__init__.py").exists())
    in_layer_order = [name for layer in webhook.LAYERS for name in layer]
    sections = [
        m.group(1)
        for _, heading in headings((ROOT / "docs" / "architecture.md").read_text())
        if (m := re.fullmatch(r"`webhook/([a-z_]+)/`", heading))
    ]
    assert sorted(sections) == packages
    assert sections == in_layer_order


def test_no_hand_written_list_of_all_shipped_policies():
    """The shipped policies are listed once, generated (docs/catalogue.md): a page naming every one of
    them by hand goes stale with the next policy."""
    names = set()
    for file in (ROOT / "policies").glob("*.yaml"):
        names.update(re.findall(r"^name:\s*(\S+)", file.read_text(), re.MULTILINE))
    assert len(names) >= 3
    generated = {ROOT / "docs" / "catalogue.md"}
    for page in [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")):
        if page in generated:
            continue
        text = page.read_text()
        named = {name for name in names if f"`{name}`" in text}
        assert named != names, f"{page.relative_to(ROOT)} lists every shipped policy; link docs/catalogue.md"


def test_github_slug_rules():
    assert github_slug("Apply-time checks (`/validate`)") == "apply-time-checks-validate"
    assert github_slug("MPI launchers: what every rank sees") == "mpi-launchers-what-every-rank-sees"
    assert github_slug("`webhook/commands/`") == "webhookcommands"
    assert (
        github_slug("Serving stack: gunicorn's master, uvicorn workers")
        == "serving-stack-gunicorns-master-uvicorn-workers"
    )
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1", "a-2"}
