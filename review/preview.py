"""The preview a pull request shows: `pulumi preview --diff` through the Automation API.

    python -m review.preview STACK --out DIR [--stack-name ORG/STACK] [--diff RENDER.diff]

Needs the Pulumi CLI, a logged-in state backend and the stack's credentials (the workflow's
preview job): a token or passphrase that can read the state and decrypt its secrets, and only
the AWS role read-only; it runs the program, so whoever changes the program sees them. The CLI
runs as ./pulumi.sh runs it (`cli_environment`): the pinned one tools/pulumi-cli.sh finds, and
with the CLI built from source, the kept cache's PULUMI_HOME holding its pulumi-command
provider, so nothing is looked for in, or downloaded to, the user's ~/.pulumi.
`stack.preview(diff=True, on_event=...)` hands every engine event to a Collector;
review/summary.py turns them into counts, a banner and labels, and writes DIR/comment.md
(scrubbed), DIR/labels and DIR/preview.txt.
"""

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from review.scrub import scrub
from review.summary import Collector, comment, summarize

ROOT = Path(__file__).resolve().parents[1]


class CliUnavailableError(Exception):
    """tools/pulumi-cli.sh found no pinned CLI and could not install one (its message)."""


def cli_environment(root: Path = ROOT, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`environ` as ./pulumi.sh runs the CLI in it, from `tools/pulumi-cli.sh env`: the pinned
    CLI first on PATH and, where that is the kept cache's build, the kept cache's PULUMI_HOME (a
    release CLI keeps the user's ~/.pulumi)."""
    script = root / "tools" / "pulumi-cli.sh"
    if not script.exists():
        raise CliUnavailableError(f"{script} is missing")
    done = subprocess.run([str(script), "env"], env=dict(environ), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CliUnavailableError(done.stderr.strip() or f"tools/pulumi-cli.sh env exited {done.returncode}")
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    env = {**environ, "PATH": os.pathsep.join(p for p in (found["cli_dir"], environ.get("PATH", "")) if p)}
    if "PULUMI_HOME" in found:
        env["PULUMI_HOME"] = found["PULUMI_HOME"]
    return env


def select_with_the_pinned_cli(stack_name: str, work_dir: str):
    """`pulumi.automation.select_stack` with the CLI and PULUMI_HOME of `cli_environment`."""
    from pulumi import automation as auto

    # The Automation API finds `pulumi` on this process's PATH and passes its environment on to
    # the CLI, the language host and the plugins.
    os.environ.update(cli_environment())
    return auto.select_stack(stack_name=stack_name, work_dir=work_dir)


def run_preview(stack: str, stack_name: str, work_dir: Path = ROOT, select=None):
    """(Summary, preview text) of one stack; a failed preview is a Summary with errors.

    `select` opens the stack (default `select_with_the_pinned_cli`)."""
    from pulumi import automation as auto

    collector = Collector()
    text = ""
    try:
        workspace_stack = (select or select_with_the_pinned_cli)(stack_name=stack_name, work_dir=str(work_dir))
        result = workspace_stack.preview(diff=True, on_event=collector, color="never")
        text = result.stdout
    except auto.errors.CommandError as error:
        text = str(error)
    except CliUnavailableError as error:
        text = f"no Pulumi CLI of the pinned version: {error}"
    except FileNotFoundError:
        text = "the Pulumi CLI is not installed (the workflow installs it with pulumi/actions)"
    summary = summarize(stack, collector.events)
    if not any(e.summary_event for e in collector.events):
        summary.errors.append(f"the preview of {stack_name} did not finish: {text.strip().splitlines()[-1:]}")
    return summary, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m review.preview", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help="stack name: stacks/Pulumi.STACK.yaml")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stack-name", help="the stack in the backend (default: STACK; ORG/STACK for Pulumi Cloud)")
    parser.add_argument("--diff", type=Path, help="output of `python -m review.diff` to show beside the preview")
    args = parser.parse_args(argv)
    summary, text = run_preview(args.stack, args.stack_name or args.stack)
    diff = args.diff.read_text() if args.diff else None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "preview.txt").write_text(scrub(text))
    (args.out / "comment.md").write_text(comment(summary, args.stack, text, diff))
    (args.out / "labels").write_text("".join(f"{label}\n" for label in summary.labels()))
    print(summary.headline())
    return 1 if summary.errors else 0


if __name__ == "__main__":
    sys.exit(main())
