"""The workflows' stack matrices, computed from stacks/ (so a new stack file is previewed at once).

    python -m review.matrix preview   # {"stack": [...]}: stacks opted in to previews by stacks/deploy.yaml
    python -m review.matrix deploy    # {"include": [{"stack", "runner"}]}: stacks opted in to deploy

Prints one line of JSON for `fromJSON` in a workflow. Refuses a deploy that would apply local
commands on a GitHub-hosted runner, or on a self-hosted one without a label of its own
(gpucluster-deploy-*) that no other workflow names.
"""

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "stacks" / "deploy.yaml"
NAMESPACE = "gpu-cluster"
KEYS = {"preview", "deploy", "runner"}
DEPLOY_LABEL = "gpucluster-deploy-"


class MatrixError(Exception):
    pass


def stacks(root: Path = ROOT) -> list[str]:
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (root / "stacks").glob("Pulumi.*.yaml"))


def runs_local_commands(stack: str, root: Path = ROOT) -> bool:
    """Whether the stack builds the cluster, whose commands run on the machine running Pulumi."""
    document = yaml.safe_load((root / "stacks" / f"Pulumi.{stack}.yaml").read_text()) or {}
    return f"{NAMESPACE}:cluster" in (document.get("config") or {})


def settings(root: Path = ROOT) -> dict[str, dict]:
    """stacks/deploy.yaml, checked: known stacks, known keys."""
    found = yaml.safe_load((root / "stacks" / "deploy.yaml").read_text()) or {}
    known = set(stacks(root))
    for stack, options in found.items():
        if stack not in known:
            raise MatrixError(f"stacks/deploy.yaml: {stack}: no stacks/Pulumi.{stack}.yaml")
        if set(options or {}) - KEYS:
            raise MatrixError(f"stacks/deploy.yaml: {stack}: unknown keys {sorted(set(options) - KEYS)}")
    return {stack: options or {} for stack, options in found.items()}


def preview_matrix(root: Path = ROOT) -> dict:
    """The stacks whose pull requests get `pulumi preview`: each needs its stack in the backend
    and its secrets there (docs/previews.md)."""
    return {"stack": sorted(stack for stack, options in settings(root).items() if options.get("preview"))}


def deploy_matrix(root: Path = ROOT) -> dict:
    include = []
    for stack, options in sorted(settings(root).items()):
        if not options.get("deploy"):
            continue
        runner = options.get("runner")
        if not runner:
            raise MatrixError(f"stacks/deploy.yaml: {stack}.runner: a deployed stack names its runner")
        labels = [runner] if isinstance(runner, str) else list(runner)
        if runs_local_commands(stack, root) and "self-hosted" not in labels:
            raise MatrixError(
                f"stacks/deploy.yaml: {stack}.runner: {labels} is a GitHub-hosted runner, but {stack} runs its "
                "commands on the machine that applies it; name a self-hosted runner on the cluster's host"
            )
        if "self-hosted" in labels and not any(label.startswith(DEPLOY_LABEL) for label in labels):
            raise MatrixError(
                f"stacks/deploy.yaml: {stack}.runner: {labels} has no label of its own for deploys"
                f" ({DEPLOY_LABEL}{stack}): a runner another workflow can name runs that workflow's code"
            )
        include.append({"stack": stack, "runner": labels})
    return {"include": include}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["preview"], ["deploy"]):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        matrix = preview_matrix() if argv == ["preview"] else deploy_matrix()
    except MatrixError as error:
        print(error, file=sys.stderr)
        return 1
    print(json.dumps(matrix, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
