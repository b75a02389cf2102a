"""Scrub key-shaped text from anything that leaves the machine (rendered files, PR comments).

Secrets marked secret in Pulumi are redacted where they are read (review/render.py); this is
the second line: text that merely looks like a key is replaced too, whatever carried it.
"""

import re

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("PEM block", re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)),
    ("PEM block", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*", re.DOTALL)),
    ("AWS access key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("Pulumi token", re.compile(r"\bpul-[0-9a-f]{40}\b")),
    ("Slack token", re.compile(r"\bxox[abeprs]-[A-Za-z0-9-]{10,}")),
    ("JWT", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    # Named secrets in assignments: keep the name, drop the value.
    (
        "secret value",
        re.compile(
            r"(?i)(?P<name>\b[\w.-]*(?:password|passwd|secret_access_key|client_secret|api_?key|access_token|"
            r"auth_token|private_key|munge_key)\b[\"']?\s*[:=]\s*)(?P<value>[\"']?[^\s\"',}]{6,}[\"']?)"
        ),
    ),
    # A munge key (1024 random bytes) or any other key as base64 or hex: long runs of key
    # alphabet. Content hashes (64 hex digits) stay; base64 needs upper, lower and digits.
    (
        "key material",
        re.compile(
            r"(?<![\w+/])(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*\d)"
            r"[A-Za-z0-9+/]{40,}={0,2}(?![\w+/])"
        ),
    ),
    ("key material", re.compile(r"\b[0-9a-fA-F]{96,}\b")),
]


def scrub(text: str) -> str:
    """`text` with every key-shaped part replaced by `[scrubbed: KIND]`."""
    for kind, pattern in _PATTERNS:
        if kind == "secret value":
            text = pattern.sub(lambda m, k=kind: f"{m.group('name')}[scrubbed: {k}]", text)
        else:
            text = pattern.sub(f"[scrubbed: {kind}]", text)
    return text
