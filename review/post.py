"""Post review comments to a pull request: one per stack, edited in place, plus labels.

    python -m review.post --pr N --dir DIR [--head-sha SHA] [--from-fork] [--comments-only | --labels-only]

DIR holds <stack>/comment.md and <stack>/labels (written by review.preview or review.summary).
Labels are set from all stacks at once (a stack's own job posts only its comment), so
`no-changes` means no stack changes.
When DIR comes from a forked pull request's artifact it is data, nothing more: stack names
must be plain names, comment text is scrubbed again, cut to GitHub's limit and gets its marker
from here, labels are limited to the known ones, and with --head-sha the pull request must
still point at the commit that was rendered. Needs GITHUB_TOKEN and GITHUB_REPOSITORY.
"""

import argparse
import json
import os
import re
import sys
import urllib.request
from pathlib import Path

from review.scrub import scrub
from review.summary import LIMIT, MARKER

STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
LABELS = ("replace", "delete", "no-changes")
ANY_MARKER = re.compile(r"<!--.*?-->", re.DOTALL)
# Put on every comment of a forked pull request, above its text: that text was made by the
# pull request's own code (review.diff, review.summary as the fork has them).
FORK_BANNER = (
    "> [!WARNING]\n"
    "> **Made by the forked pull request's own code**, without credentials: this repository's\n"
    "> workflow only posts it. Read the pull request's changes themselves before trusting it.\n"
)


def read_comments(directory: Path, *, fork: bool = False) -> dict[str, tuple[str, list[str]]]:
    """stack -> (comment body with its marker, labels); refuses anything that is not plain data.
    `fork`: each body gets FORK_BANNER first, after its marker."""
    found = {}
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith("."):
            continue
        if not entry.is_dir() or entry.is_symlink() or not STACK_NAME.match(entry.name):
            raise SystemExit(f"unexpected entry in {directory}: {entry.name!r}")
        stack = entry.name
        comment_file, labels_file = entry / "comment.md", entry / "labels"
        if comment_file.is_symlink() or labels_file.is_symlink():
            raise SystemExit(f"{stack}: symlinks are not accepted")
        body = ANY_MARKER.sub("", comment_file.read_text(errors="replace"))
        body = scrub(body)[: LIMIT - 100]
        labels = labels_file.read_text().split() if labels_file.exists() else []
        banner = FORK_BANNER + "\n" if fork else ""
        found[stack] = (f"{MARKER.format(stack=stack)}\n{banner}{body.lstrip()}", [x for x in labels if x in LABELS])
    return found


class GitHub:
    def __init__(self, token: str, repository: str, api: str = "https://api.github.com"):
        self.token, self.repository, self.api = token, repository, api.rstrip("/")

    def request(self, method: str, path: str, data: dict | list | None = None):
        request = urllib.request.Request(
            f"{self.api}/repos/{self.repository}{path}",
            method=method,
            data=json.dumps(data).encode() if data is not None else None,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            },
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def comments(self, pr: int) -> list[dict]:
        found, page = [], 1
        while batch := self.request("GET", f"/issues/{pr}/comments?per_page=100&page={page}"):
            found += batch
            page += 1
        return found


def post_comments(github: GitHub, pr: int, comments: dict[str, tuple[str, list[str]]]) -> None:
    """One comment per stack: the one carrying the stack's marker is edited, else one is created."""
    existing = {}
    for comment in github.comments(pr):
        for stack in comments:
            if comment["body"].startswith(MARKER.format(stack=stack)) and stack not in existing:
                existing[stack] = comment["id"]
    for stack, (body, _) in comments.items():
        if stack in existing:
            github.request("PATCH", f"/issues/comments/{existing[stack]}", {"body": body})
        else:
            github.request("POST", f"/issues/{pr}/comments", {"body": body})


def set_labels(github: GitHub, pr: int, comments: dict[str, tuple[str, list[str]]]) -> None:
    """`replace` / `delete` if any stack has them, `no-changes` only if every stack has it."""
    per_stack = [set(labels) for _, labels in comments.values()]
    labels = set().union(*per_stack) - {"no-changes"}
    if per_stack and all("no-changes" in stack for stack in per_stack):
        labels.add("no-changes")
    current = {label["name"] for label in github.request("GET", f"/issues/{pr}/labels")}
    for label in sorted((current & set(LABELS)) - labels):
        github.request("DELETE", f"/issues/{pr}/labels/{label}")
    if labels - current:
        github.request("POST", f"/issues/{pr}/labels", {"labels": sorted(labels - current)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m review.post", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pr", required=True, help="pull request number")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--head-sha", help="refuse unless the pull request's head is this commit")
    parser.add_argument("--from-fork", action="store_true", help="mark each comment as made by the fork's code")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--comments-only", action="store_true")
    only.add_argument("--labels-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.pr.isdigit():
        raise SystemExit(f"--pr: not a number: {args.pr!r}")
    github = GitHub(
        os.environ["GITHUB_TOKEN"],
        os.environ["GITHUB_REPOSITORY"],
        os.environ.get("GITHUB_API_URL") or "https://api.github.com",
    )
    if args.head_sha:
        head = github.request("GET", f"/pulls/{args.pr}")["head"]["sha"]
        if head != args.head_sha:
            raise SystemExit(f"pull request {args.pr} is at {head}, not the rendered {args.head_sha}: not posting")
    comments = read_comments(args.dir, fork=args.from_fork)
    if not args.labels_only:
        post_comments(github, int(args.pr), comments)
    if not args.comments_only:
        set_labels(github, int(args.pr), comments)
    return 0


if __name__ == "__main__":
    sys.exit(main())
