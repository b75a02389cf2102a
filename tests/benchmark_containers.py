"""What a job in a large container image costs: its pull and first start on a node, and a
start from the node's cache (docs/containers.md, "What it costs").

    flock /tmp/gpucluster-host.lock venv/bin/python tests/benchmark_containers.py [--size-mb 1024] [--out DIR]

The trixie e2e cluster of tests/harness/release_e2e.py (a login node, the tests' registry:
Debian's docker-registry with TLS and an account), without job accounting, through the real
engine. An image of busybox and SIZE MB of incompressible data (what a CUDA base's libraries
are to lzo: little to gain) is built here with umoci and pushed with skopeo; then, as alice on
the login node, `srun --container-image=... true` on one node, twice (the second from her
cache on the node), each timed, and what Enroot keeps for her there. The cluster is destroyed
and its kept files purged at the end, also when a step fails. Figures go to DIR/containers.json.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness import registry as test_registry  # noqa: E402
from tests.harness.containers_e2e import DATA_DIR, OTHER, in_node, timed  # noqa: E402
from tests.harness.e2e_teardown import STACK, purge_kept  # noqa: E402
from tests.harness.engine_cluster import apply, destroy, host_commands  # noqa: E402
from tests.harness.login_node import login_keys, public_keys, ssh_as  # noqa: E402
from tests.harness.program_harness import run_program  # noqa: E402
from tests.harness.release_e2e import REGISTRY_ADDRESS, REGISTRY_SECRET, release_config  # noqa: E402

IMAGE = "gpucluster/large:1"
ALICE_UID = 2101


def timed_start(key: Path, image: str) -> tuple[float, str]:
    done, seconds = timed(key, "alice", f"srun -w {OTHER} --container-image={image} sh -c 'ls -l /filler'")
    return seconds, done.stdout.strip()


def named_steps(key: Path, image: str, shared: str) -> list[str]:
    """Two steps of one job with `--container-name`: the second reuses the first's unpacked
    container (Pyxis keeps a named container for its job: container_scope=job)."""
    step = f"srun --container-name=large --container-image={image} true"
    measured = f's=$(date +%s%N); {step}; echo "step $1: $(( ($(date +%s%N) - s) / 1000000 )) ms"'
    script = f"sh -c '{measured}' step 1; sh -c '{measured}' step 2"
    own = f"{shared}/alice"
    batch = f"cd {own} && sbatch --wait -w {OTHER} -o named.out --wrap {shlex.quote(script)} >/dev/null"
    done = ssh_as(key, "alice", f"{batch} && cat named.out && rm named.out")
    return done.stdout.strip().splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="the image's incompressible data (default 1024)")
    parser.add_argument("--release", default="trixie", help="the node image's Debian release (default trixie)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "gpucluster-bench-containers")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: it brings up a cluster on this host")
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict = {"size_mb": args.size_mb, "release": args.release, "date": time.strftime("%Y-%m-%d %H:%M")}
    with (
        tempfile.TemporaryDirectory(prefix="gpucluster-bench-containers-") as tmp,
        test_registry.running_registry(REGISTRY_ADDRESS) as registry,
    ):
        work = Path(tmp)
        keys = login_keys(work)
        config = release_config(args.release, public_keys(keys), registry=registry)
        config["cluster"].pop("accounting")
        cluster = config["cluster"]["name"]
        commands = host_commands(run_program(config, stack=STACK, secrets={REGISTRY_SECRET: registry.password}))
        destroy(commands)  # what a killed run left
        try:
            started = time.monotonic()
            test_registry.push_image(registry, work, IMAGE, filler_mb=args.size_mb)
            figures["push_s"] = round(time.monotonic() - started, 1)
            timeline = apply(commands, timeout=1500)
            figures["bring_up_s"] = round(timeline.finished(f"{cluster}-health"), 1)
            image = f"{registry.username}@{registry.address}#{IMAGE}"
            figures["first_start_s"], figures["first_output"] = timed_start(keys["alice"], image)
            figures["cached_start_s"], _ = timed_start(keys["alice"], image)
            figures["third_start_s"], _ = timed_start(keys["alice"], image)
            figures["named_steps_ms"] = named_steps(keys["alice"], image, config["cluster"]["host"]["shared_dir"])
            figures["kept_on_node"] = in_node(
                cluster, OTHER, f"du -sm {DATA_DIR}/cache/user-{ALICE_UID} {DATA_DIR}/data/user-{ALICE_UID}"
            ).splitlines()
            figures["node_disk"] = in_node(cluster, OTHER, f"df -m --output=avail,fstype {DATA_DIR} | tail -n1")
        finally:
            figures["destroy_s"] = round(destroy(commands).wall_seconds, 1)
            purge_kept()
    (args.out / "containers.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    print(f"wrote {args.out / 'containers.json'}")


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as error:
        sys.exit(f"{error.cmd} failed: {error.stderr}")
