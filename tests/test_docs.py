"""The README and docs/ hold together: every relative link (file, image, #anchor) reaches
something that exists, and the README, the newcomer's entry, links every file of docs/."""

import re
from pathlib import Path

import pytest

from tests.harness.docs import DOCS, README, ROOT, doc_files

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def prose(text: str) -> str:
    """The text without code blocks and inline code, where brackets and '#' are no markup."""
    return re.sub(r"`[^`]*`", "", without_code_blocks(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2... as on GitHub."""
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", without_code_blocks(path.read_text()), re.M):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
            broken.append(f"{target}: no heading #{anchor} in {resolved}")
    return broken


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(path):
    assert broken_links(path) == []


def test_the_readme_links_every_docs_file():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in relative_links(README)}
    assert [str(p.relative_to(ROOT)) for p in sorted(DOCS.rglob("*.md")) if p.resolve() not in linked] == []


def test_slugs_follow_githubs_rules():
    assert slug("What the `k8s` stack needs") == "what-the-k8s-stack-needs"
    assert slug("Reboot, drift and destroy") == "reboot-drift-and-destroy"
    assert slug("The web app's page") == "the-web-apps-page"
    assert slug("host_port and forwards[]") == "host_port-and-forwards"


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Some `code` here\n\n## Some code here\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#some-code-here) [ok](a.md#some-code-here-1) [self](#top)\n\n# Top\n\n"
        "[gone](missing.md) [no anchor](a.md#nothing) `[code](ignored.md)` [web](https://example.com/x)\n"
    )
    assert [line.split(":")[0] for line in broken_links(page)] == ["missing.md", "a.md#nothing"]
