"""Unified diff of a stack's offline render between two commits (or two render directories).

    python -m review.diff STACK --base REF [--head REF]      # head defaults to the working tree
    python -m review.diff --base-dir DIR --head-dir DIR

Each commit is extracted with `git archive` into a temporary directory and rendered there by
this repository's render tool in a fresh interpreter (review/render.py --root), so the base's
own program and stack file are rendered. A stack missing at a commit renders as nothing.
Prints nothing when the renders are the same.
"""

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from review import tarball

ROOT = Path(__file__).resolve().parents[1]


def _files(directory: Path) -> dict[str, str]:
    if not directory.exists():
        return {}
    return {str(p.relative_to(directory)): p.read_text() for p in sorted(directory.rglob("*")) if p.is_file()}


def diff_dirs(base: Path, head: Path) -> str:
    """A unified diff (a/ base, b/ head) over every file of two renders, in path order."""
    old, new = _files(base), _files(head)
    out: list[str] = []
    for path in sorted(set(old) | set(new)):
        if old.get(path) == new.get(path):
            continue
        a = old.get(path, "").splitlines(keepends=True)
        b = new.get(path, "").splitlines(keepends=True)
        label_a = f"a/{path}" if path in old else "/dev/null"
        label_b = f"b/{path}" if path in new else "/dev/null"
        for line in difflib.unified_diff(a, b, label_a, label_b, n=3):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def extract(ref: str, into: Path) -> Path:
    """The files of commit `ref` of this repository under `into`."""
    archive = subprocess.run(["git", "archive", "--format=tar", ref], cwd=ROOT, capture_output=True, check=True)
    tar_path = into.with_suffix(".tar")
    tar_path.write_bytes(archive.stdout)
    tarball.extract(tar_path, into)
    tar_path.unlink()
    return into


def _render_environment() -> dict[str, str]:
    """The render's environment, with the sources of Enroot and Pyxis (the node image's) where
    this checkout finds them: a commit extracted into a temporary directory has none beside it."""
    from components.lxc.node_image import third_party

    try:
        return {**os.environ, "PULUMI_PLUGIN_SOURCES": str(third_party())}
    except FileNotFoundError:
        return dict(os.environ)


def render_tree(stack: str, tree: Path, outdir: Path) -> None:
    """Render `stack` of the program in `tree` into `outdir` (nothing if the tree lacks the stack)."""
    if not (tree / "stacks" / f"Pulumi.{stack}.yaml").exists():
        outdir.mkdir(parents=True, exist_ok=True)
        return
    done = subprocess.run(
        [sys.executable, "-m", "review.render", stack, str(outdir), "--root", str(tree)],
        cwd=ROOT,
        env=_render_environment(),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"render of {stack} in {tree} failed:\n{done.stderr.strip()}")


def diff_refs(stack: str, base: str, head: str | None) -> str:
    with tempfile.TemporaryDirectory(prefix="review-diff-") as tmp:
        tmp_path = Path(tmp)
        trees = {"base": extract(base, tmp_path / "base-tree")}
        trees["head"] = extract(head, tmp_path / "head-tree") if head else ROOT
        for side, tree in trees.items():
            render_tree(stack, tree, tmp_path / side)
        return diff_dirs(tmp_path / "base", tmp_path / "head")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m review.diff", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", nargs="?", help="stack name: stacks/Pulumi.STACK.yaml")
    parser.add_argument("--base", help="git ref of the base (e.g. origin/main)")
    parser.add_argument("--head", help="git ref of the head (default: the working tree)")
    parser.add_argument("--base-dir", type=Path, help="an earlier render (instead of --base)")
    parser.add_argument("--head-dir", type=Path, help="an earlier render (instead of --head)")
    args = parser.parse_args(argv)
    if args.base_dir and args.head_dir:
        sys.stdout.write(diff_dirs(args.base_dir, args.head_dir))
    elif args.stack and args.base:
        sys.stdout.write(diff_refs(args.stack, args.base, args.head))
    else:
        parser.error("give STACK --base REF [--head REF], or --base-dir DIR --head-dir DIR")
    return 0


if __name__ == "__main__":
    from review.cli import run

    sys.exit(run(main))
