"""The project's documentation: README.md, the entry, and the topic files under docs/."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def doc_files() -> list[Path]:
    """README.md, then every Markdown file under docs/ (sub-folders included)."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def bash_lines(text: str) -> list[str]:
    """The lines of a Markdown text's ```bash blocks."""
    return [line for block in re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S) for line in block.splitlines()]
