"""The GitHub workflows, checked offline: GitHub's schema, pinned actions, minimal permissions,
the fork guard, and the stack matrices they compute."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from review.matrix import DEPLOY, MatrixError, deploy_matrix, preview_matrix
from review.post import FORK_BANNER, post_comments, read_comments, set_labels
from review.program import ROOT
from review.summary import MARKER

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def _load(name: str) -> dict:
    document = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads `on:` as True
    return document


def _steps(document: dict):
    for job_name, job in document["jobs"].items():
        for step in job.get("steps", []):
            yield job_name, step


def test_workflows_pass_githubs_workflow_schema():
    assert [p.name for p in WORKFLOWS] == ["deploy.yml", "review-post.yml", "review.yml"]
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit(path):
    text = path.read_text()
    uses = re.findall(r"uses:\s*(\S+)(?:\s*#\s*(\S+))?", text)
    assert uses
    for action, tag in uses:
        assert PINNED.match(action), f"{path.name}: {action} is not pinned to a full commit SHA"
        assert re.match(r"^v\d+\.\d+\.\d+$", tag), f"{path.name}: {action} names no exact version in a comment"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_permissions_are_minimal(path):
    document = _load(path.name)
    assert document["permissions"] == {"contents": "read"}
    allowed = {
        ("review.yml", "preview"): {"contents": "read", "id-token": "write"},
        ("review.yml", "comment"): {"contents": "read", "pull-requests": "write"},
        ("review-post.yml", "post"): {"contents": "read", "actions": "read", "pull-requests": "write"},
        ("deploy.yml", "deploy"): {"contents": "read", "id-token": "write"},
    }
    for name, job in document["jobs"].items():
        assert job["permissions"] == allowed.get((path.name, name), {"contents": "read"}), (path.name, name)


def test_no_workflow_runs_pull_request_code_with_privileges():
    for path in WORKFLOWS:
        document = _load(path.name)
        assert "pull_request_target" not in document["on"], path.name
        for _, step in _steps(document):
            # No checkout of another ref (a PR's head) anywhere; credentials never persisted.
            if step.get("uses", "").startswith("actions/checkout@"):
                assert "ref" not in (step.get("with") or {}), path.name
                assert step["with"]["persist-credentials"] is False, path.name
    post = _load("review-post.yml")
    assert list(post["on"]) == ["workflow_run"]
    assert "head_repository.full_name != github.repository" in post["jobs"]["post"]["if"]
    run = " ".join(step.get("run", "") for _, step in _steps(post))
    assert "review.post" in run and "--head-sha" in run
    assert "bash" not in run and "source" not in run  # the artifact is read, never executed


def test_fork_guard_splits_preview_and_render():
    jobs = _load("review.yml")["jobs"]
    same_repo = "github.event.pull_request.head.repo.full_name == github.repository"
    assert jobs["preview"]["if"].startswith(same_repo + " &&")
    assert jobs["render"]["if"] == same_repo.replace("==", "!=")
    assert jobs["preview"]["environment"] == "preview"
    render = yaml.safe_dump(jobs["render"])
    assert "secrets." not in render and "environment" not in jobs["render"] and "id-token" not in render
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in jobs["render"]["steps"])
    assert jobs["preview"]["needs"] == ["tests", "matrix"] and jobs["render"]["needs"] == ["tests", "matrix"]


def test_preview_uses_pulumi_actions_read_only_credentials_and_the_backend_variable():
    jobs = _load("review.yml")["jobs"]
    steps = jobs["preview"]["steps"]
    assert any(s.get("uses", "").startswith("pulumi/actions@") for s in steps)
    aws = next(s for s in steps if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@"))
    assert aws["with"]["role-to-assume"] == "${{ vars.AWS_PREVIEW_ROLE_ARN }}"
    assert jobs["preview"]["env"]["PULUMI_BACKEND_URL"] == "${{ vars.PULUMI_BACKEND_URL }}"
    assert jobs["preview"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.stacks) }}"
    run = " ".join(s.get("run", "") for s in steps)
    assert "review.diff" in run and "review.preview" in run and "review.post" not in run


def test_previews_are_opt_in_per_stack(tmp_path):
    opted = sorted(stack for stack, options in yaml.safe_load(DEPLOY.read_text()).items() if options.get("preview"))
    assert preview_matrix()["stack"] == opted and "e2e" not in opted
    # A new site's file is not previewed until it opts in.
    root = _repo_with(tmp_path, {"local": {"preview": True}, "k8s": {"deploy": False}})
    assert preview_matrix(root) == {"stack": ["local"]}
    step = next(s for _, s in _steps(_load("review.yml")) if s.get("id") == "stacks")
    assert "python -m review.matrix preview" in step["run"]
    done = subprocess.run([sys.executable, "-m", "review.matrix", "preview"], cwd=ROOT, capture_output=True, text=True)
    assert json.loads(done.stdout) == preview_matrix()


def _repo_with(tmp_path: Path, deploy: dict) -> Path:
    (tmp_path / "stacks").mkdir()
    for stack in ("local", "k8s"):
        shutil.copy(ROOT / "stacks" / f"Pulumi.{stack}.yaml", tmp_path / "stacks")
    (tmp_path / "stacks" / "deploy.yaml").write_text(yaml.safe_dump(deploy))
    return tmp_path


def test_deploy_is_opt_in_and_names_its_runner(tmp_path):
    assert deploy_matrix() == {"include": []} or all(e["runner"] for e in deploy_matrix()["include"])
    root = _repo_with(
        tmp_path,
        {"local": {"deploy": True, "runner": ["self-hosted", "gpucluster-deploy-local"]}, "k8s": {"deploy": False}},
    )
    expected = {"include": [{"stack": "local", "runner": ["self-hosted", "gpucluster-deploy-local"]}]}
    assert deploy_matrix(root) == expected
    deploy = _load("deploy.yml")["jobs"]["deploy"]
    assert deploy["runs-on"] == "${{ matrix.runner }}"
    assert deploy["environment"] == "deploy-${{ matrix.stack }}"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"local": {"deploy": True, "runner": "ubuntu-latest"}}, "local.runner: ['ubuntu-latest'] is a GitHub-hosted"),
        ({"local": {"deploy": True}}, "local.runner: a deployed stack names its runner"),
        ({"nowhere": {"deploy": True, "runner": "x"}}, "nowhere: no stacks/Pulumi.nowhere.yaml"),
        (
            {"local": {"deploy": True, "runner": ["self-hosted", "gpucluster-local"]}},
            "local.runner: ['self-hosted', 'gpucluster-local'] has no label of its own for deploys",
        ),
    ],
)
def test_a_local_stack_is_never_applied_on_a_hosted_runner(tmp_path, settings, message):
    with pytest.raises(MatrixError, match=re.escape(message)):
        deploy_matrix(_repo_with(tmp_path, settings))


def test_a_fork_artifact_is_read_as_data(tmp_path):
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "comment.md").write_text(
        f"{MARKER.format(stack='k8s')}\nhello AKIAIOSFODNN7EXAMPLE <!-- sneaky -->\n"
    )
    (tmp_path / "local" / "labels").write_text("replace\nsecurity-approved\n")
    body, labels = read_comments(tmp_path)["local"]
    assert body.startswith(MARKER.format(stack="local")) and "k8s" not in body and "sneaky" not in body
    assert "AKIAIOSFODNN7EXAMPLE" not in body
    assert labels == ["replace"]
    (tmp_path / "bad name").mkdir()
    with pytest.raises(SystemExit, match="unexpected entry"):
        read_comments(tmp_path)


class _FakeGitHub:
    """The few REST calls review.post makes, against an in-memory pull request."""

    def __init__(self, comments: list[dict], labels: list[str]):
        self.comments_, self.labels, self.calls = comments, set(labels), []

    def comments(self, pr):
        return self.comments_

    def request(self, method, path, data=None):
        self.calls.append((method, path))
        if method == "GET":
            return [{"name": label} for label in sorted(self.labels)]
        if method == "PATCH":
            next(c for c in self.comments_ if path.endswith(f"/{c['id']}"))["body"] = data["body"]
        elif method == "POST" and path.endswith("/comments"):
            self.comments_.append({"id": len(self.comments_) + 100, "body": data["body"]})
        elif method == "POST":
            self.labels |= set(data["labels"])
        elif method == "DELETE":
            self.labels.discard(path.rsplit("/", 1)[1])


def test_one_comment_per_stack_is_edited_in_place(tmp_path):
    github = _FakeGitHub([{"id": 7, "body": MARKER.format(stack="local") + "\nold"}, {"id": 8, "body": "a human"}], [])
    comments = {
        "local": (MARKER.format(stack="local") + "\nnew", ["replace"]),
        "k8s": (MARKER.format(stack="k8s") + "\nfirst", ["no-changes"]),
    }
    post_comments(github, 1, comments)
    post_comments(github, 1, comments)  # a second push edits, never adds
    bodies = sorted(c["body"] for c in github.comments_)
    assert bodies == sorted([MARKER.format(stack="local") + "\nnew", "a human", MARKER.format(stack="k8s") + "\nfirst"])


@pytest.mark.parametrize(
    ("per_stack", "before", "after"),
    [
        ({"local": ["replace"], "k8s": ["no-changes"]}, ["no-changes", "bug"], {"replace", "bug"}),
        ({"local": ["no-changes"], "k8s": ["no-changes"]}, ["replace", "delete"], {"no-changes"}),
        ({"local": ["replace", "delete"], "k8s": []}, [], {"replace", "delete"}),
    ],
)
def test_labels_come_from_every_stack_at_once(per_stack, before, after):
    github = _FakeGitHub([], before)
    set_labels(github, 1, {stack: ("", labels) for stack, labels in per_stack.items()})
    assert github.labels == after


# ---- credentials, runners and fork comments ----


def test_the_preview_job_has_credentials_but_no_write_token_and_the_comment_job_the_reverse():
    jobs = _load("review.yml")["jobs"]
    preview, comment = yaml.safe_dump(jobs["preview"]), yaml.safe_dump(jobs["comment"])
    assert "secrets.PULUMI_CONFIG_PASSPHRASE" in preview and jobs["preview"]["environment"] == "preview"
    assert "pull-requests" not in jobs["preview"]["permissions"] and "github.token" not in preview
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in jobs["preview"]["steps"])
    assert jobs["comment"]["needs"] == "preview" and jobs["comment"]["permissions"]["pull-requests"] == "write"
    assert "secrets." not in comment and "environment" not in jobs["comment"] and "id-token" not in comment
    assert "review.post" in " ".join(s.get("run", "") for s in jobs["comment"]["steps"])


def _locked(lock: Path = ROOT / "requirements.lock") -> dict[str, tuple[str, list[str]]]:
    """A lock (requirements.lock unless named): name -> (version, hashes)."""
    entries = {}
    # One requirement per logical line; its hashes continue it on lines ending in a backslash.
    text = lock.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if line and not line.startswith("#"):
            pin, *hashes = line.split()
            name, version = pin.split("==")
            assert all(h.startswith("--hash=") for h in hashes), line
            entries[name.lower().replace("_", "-")] = (version, [h.removeprefix("--hash=") for h in hashes])
    return entries


def test_jobs_with_secrets_or_a_write_token_install_only_hashed_pins():
    """Item 2 of issue 35 (M9): the credentialed preview job installed requirements.txt, whose
    ranges let a new release of any dependency read the passphrase."""
    jobs_with_secrets = (
        ("review.yml", "preview"),
        ("review.yml", "comment"),
        ("review-post.yml", "post"),
        ("deploy.yml", "deploy"),
        ("deploy.yml", "matrix"),
    )
    for workflow, job_name in jobs_with_secrets:
        jobs = _load(workflow)["jobs"]
        job = jobs.get(job_name) or next(j for j in jobs.values() if "pull-requests" in j.get("permissions", {}))
        installs = [s["run"] for s in job["steps"] if "pip install" in s.get("run", "")]
        assert installs, (workflow, job_name)
        for run in installs:
            assert "--require-hashes --no-deps -r requirements.lock" in run and "requirements.txt" not in run, run
    for name, (version, hashes) in _locked().items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), name
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name


def test_the_lock_installs_on_every_python_and_machine_it_is_for():
    """Issue 35 (M9): the lock held one file's hash per package (CPython 3.11 on x86_64), so a
    runner with another Python or machine failed its hash check: now every file of the
    version, so each compiled package has a wheel per Python and machine."""
    locked = _locked()
    for name in ("pydantic-core", "pyyaml", "cffi", "cryptography", "grpcio"):
        assert len(locked[name][1]) >= 6, (name, len(locked[name][1]))
    from tools.lock_requirements import MACHINES, PYTHONS

    assert PYTHONS == ("3.11", "3.12", "3.13") and MACHINES == ("x86_64", "aarch64")
    header = (ROOT / "requirements.lock").read_text().splitlines()[1]
    assert "CPython 3.11, 3.12, 3.13 on Linux x86_64, aarch64" in header


def test_the_lock_tool_keeps_every_file_and_names_what_a_python_it_is_for_would_lack():
    from tools.lock_requirements import lock_text, missing_anywhere

    def item(name, requires=(), extras=()):
        metadata = {"name": name, "version": "1.0", "requires_dist": list(requires)}
        return {
            "metadata": metadata,
            "requested_extras": list(extras),
            "download_info": {"archive_info": {"hash": "sha256=aa"}},
        }

    report = {"install": [item("a", ['b; python_version < "3.11"', 'c; extra == "x"', "d"], extras=["x"]), item("d")]}
    assert missing_anywhere(report) == ['c; extra == "x" (of a)']  # b only below 3.11: not needed
    report["install"].append(item("c", ['e; python_version >= "3.13"', 'f; platform_machine == "aarch64"']))
    assert missing_anywhere(report) == ['e; python_version >= "3.13" (of c)', 'f; platform_machine == "aarch64" (of c)']
    text = lock_text({"install": [item("a")]}, lambda name, version: ["aa", "bb"])
    assert text.endswith("a==1.0 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\n")
    with pytest.raises(SystemExit, match="the file pip picked"):
        lock_text({"install": [item("a")]}, lambda name, version: ["bb"])


def test_each_lock_satisfies_its_requirements():
    """Each lock is made from its requirements file (tools/lock_requirements.py): every
    requirement is in it (or, for the test tools' lock, in the program's lock it is installed
    beside) at a version its specifier allows, and every pin carries its files' sha256."""
    from packaging.requirements import Requirement

    from tools.lock_requirements import LOCKS

    assert [(s.relative_to(ROOT).as_posix(), lock.relative_to(ROOT).as_posix()) for s, lock, _ in LOCKS] == [
        ("requirements.txt", "requirements.lock"),
        ("requirements-test.txt", "requirements-test.lock"),
        ("components/burst/files/requirements.txt", "components/burst/files/requirements.lock"),
    ]
    for source, lock, beside in LOCKS:
        locked = {**(_locked(beside) if beside else {}), **_locked(lock)}
        for name, (_version, hashes) in _locked(lock).items():
            assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), (lock.name, name)
        for line in source.read_text().splitlines():
            line = line.split("#")[0].strip()
            if not line:
                continue
            wanted = Requirement(line)
            name = wanted.name.lower().replace("_", "-")
            assert name in locked, f"{name} is not in {lock.name}: run venv/bin/python tools/lock_requirements.py"
            assert wanted.specifier.contains(locked[name][0], prereleases=True), (name, locked[name][0], str(wanted))


def test_the_test_tools_lock_holds_only_what_the_program_s_lock_lacks():
    """Installed together (--no-deps), the two locks are one set: no package in both."""
    program, tests = _locked(), _locked(ROOT / "requirements-test.lock")
    assert not set(program) & set(tests)
    for tool in ("pytest", "ruff", "hypothesis", "moto"):
        assert tool in tests and tool not in program, tool


def test_the_burst_venv_installs_its_hashed_lock_only():
    """P9: the controller's burst venv (as root, for programs holding the AWS key) installed
    boto3 with unpinned, unhashed dependencies."""
    script = (ROOT / "components" / "burst" / "files" / "programs_create.sh").read_text()
    installs = [line for line in script.splitlines() if "pip" in line and " install " in line]
    assert installs == [
        '    "$1/venv/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps '
        '-r "$1/lib/requirements.lock"'
    ]
    locked = _locked(ROOT / "components" / "burst" / "files" / "requirements.lock")
    for dependency in ("boto3", "botocore", "jmespath", "s3transfer", "urllib3", "python-dateutil", "six"):
        assert dependency in locked, dependency


def test_only_deploy_runs_on_a_self_hosted_runner_and_only_for_a_push_to_main():
    for path in WORKFLOWS:
        for name, job in _load(path.name)["jobs"].items():
            if (path.name, name) != ("deploy.yml", "deploy"):
                assert job["runs-on"] == "ubuntu-latest", (path.name, name)
    deploy = _load("deploy.yml")
    assert list(deploy["on"]) == ["push"] and deploy["on"]["push"]["branches"] == ["main"]
    condition = deploy["jobs"]["deploy"]["if"]
    assert "github.event_name == 'push' && github.ref == 'refs/heads/main'" in condition
    for options in yaml.safe_load(DEPLOY.read_text()).values():
        runner = options.get("runner") or []
        if "self-hosted" in runner:
            assert any(label.startswith("gpucluster-deploy-") for label in runner), runner


def test_the_deploy_leaves_the_runner_no_tracking_id_to_kill_the_cluster_by():
    """A self-hosted runner kills, after a job, every process whose environment holds the job's
    RUNNER_TRACKING_ID: the `pulumi up` step clears it (the scripts start detached as well)."""
    steps = _load("deploy.yml")["jobs"]["deploy"]["steps"]
    (up,) = [step for step in steps if step.get("uses", "").startswith("pulumi/actions@")]
    assert up["with"]["command"] == "up"
    assert up["env"] == {"RUNNER_TRACKING_ID": ""}


def test_the_cli_in_ci_is_the_one_up_sh_pins():
    pinned = re.search(r"^VERSION=(\S+)$", (ROOT / "tools" / "pulumi-cli.sh").read_text(), re.M).group(1)
    found = 0
    for path in WORKFLOWS:
        document = _load(path.name)
        for job in document["jobs"].values():
            steps = job.get("steps", [])
            for step in steps:
                if step.get("uses", "").startswith("pulumi/actions@"):
                    found += 1
                    assert step["with"]["pulumi-version"] == "${{ steps.cli.outputs.version }}"
                    cli = next(s for s in steps if s.get("id") == "cli")
                    out = subprocess.run(
                        ["bash", "-c", cli["run"].replace('>> "$GITHUB_OUTPUT"', "")],
                        cwd=ROOT,
                        capture_output=True,
                        text=True,
                    )
                    assert out.stdout.strip() == f"version={pinned}"
    assert found == 2


def test_the_hosted_tests_job_runs_the_unprivileged_selection():
    job = _load("review.yml")["jobs"]["tests"]
    assert job["container"] == "debian:12"  # a plain container: no --privileged, no added capabilities
    run = " ".join(s.get("run", "") for s in job["steps"])
    assert '-m "not e2e and not privileged"' in run
    markers = (ROOT / "pyproject.toml").read_text()
    assert '"privileged: ' in markers and '"e2e: ' in markers


def test_fork_comments_are_marked_and_the_branch_is_no_part_of_a_url(tmp_path):
    run = " ".join(step.get("run", "") for _, step in _steps(_load("review-post.yml")))
    assert "--from-fork" in run
    api = re.search(r"gh api ([^|]*?)--jq", run).group(1)
    assert "?" not in api and "$HEAD_BRANCH" not in api.split()[2]
    assert '-f "head=$HEAD_OWNER:$HEAD_BRANCH"' in api
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "comment.md").write_text("### `local`: no changes\n")
    body, _ = read_comments(tmp_path, fork=True)["local"]
    assert body == f"{MARKER.format(stack='local')}\n{FORK_BANNER}\n### `local`: no changes\n"
    body, _ = read_comments(tmp_path)["local"]
    assert FORK_BANNER not in body


def test_the_docs_say_what_each_stack_needs_before_it_is_previewed():
    doc = (ROOT / "docs" / "previews.md").read_text()
    table = doc[doc.index("What each stack needs before it opts in to previews") :]
    table = table[: table.index("\n\n", table.index("| stack | needs |"))]
    named = set(re.findall(r"`(\w+)`", " ".join(line.split("|")[1] for line in table.splitlines() if "|" in line)))
    assert set(yaml.safe_load(DEPLOY.read_text())) <= named
    for secret in ("gpu2SshKey", "awsSshKey", "AWS_PREVIEW_ROLE_ARN"):
        assert secret in table
    assert "What the preview credentials can do" in doc and "The deploy runner" in doc
