"""End-to-end over SSH: the e2e stack's one host reached over SSH, and a cluster of two hosts.

Every command of an SSH host is a `remote.Command`, run by the real engine's pulumi-command
provider over SSH (tests/harness/engine_cluster.py), through an sshd that the test starts
with its own config file, port and drop-in directory (tests/harness/ssh_hosts.py). The second
host is a network namespace with its own bridges, routes, iptables rules, sshd, LXC path,
state and run directories. Everything is removed in `finally` blocks, and the host is
compared with its state before the test.
"""

import base64
import json
import shlex
import tempfile
import time
from pathlib import Path

import pytest

from components.common.transport import INTERPRETER, script
from components.composition.host_state import render_host_state
from components.composition.stack_config import parse_stack_config
from components.host.boot_unit import FILES as HOST_FILES
from tests.harness import ssh_hosts
from tests.harness.e2e_teardown import (
    FIRST_HOST_SECRET,
    SECOND_HOST,
    SECRET,
    SHARED_DIR,
    SSH_HOST,
    STACK,
    one_ssh_host_config,
    remove_outside_namespace,
    remove_stand_in_gpus,
    teardown,
    teardown_ssh_stacks,
    two_host_config,
    two_ssh_hosts_config,
)
from tests.harness.engine_cluster import State, apply, destroy_state, host_commands, makes_the_munge_key, up
from tests.harness.program_harness import run_program
from tests.test_e2e import (
    check_cluster,
    host_snapshot,
    leftovers,
    make_outside_namespace,
    require_host,
    sh,
    slurm_env,
)

pytestmark = pytest.mark.e2e
CLUSTER = "e2e"
SLURM = slurm_env(CLUSTER)
SECOND_STATE = f"/var/lib/gpucluster-e2e-h2/{CLUSTER}"
# What one resource may keep in the state (before the script store: up to 130 KB).
STATE_PER_RESOURCE = 16_000


def changed(actions: dict[str, str]) -> dict[str, str]:
    return {name: action for name, action in actions.items() if action != "same"}


def on_second_host(*argv: str, check: bool = True, env: dict | None = None):
    """A command run on the second host directly (its namespaces), to look, not to change."""
    return sh(*ssh_hosts.host_argv(SECOND_HOST), *argv, check=check, env=env)


def pids(command: list[str], nodes: list[str], lxc_path: dict[str, str]) -> dict[str, str]:
    found = {}
    for node in nodes:
        prefix = ssh_hosts.host_argv(SECOND_HOST) if node in lxc_path else []
        path = ["-P", lxc_path[node]] if node in lxc_path else []
        found[node] = sh(*prefix, "lxc-attach", *path, "-n", f"{CLUSTER}-{node}", "--", *command).stdout.strip()
    return found


def second_host_leftovers() -> list[str]:
    """Anything of the cluster still on the second host."""
    found = []
    links = on_second_host("ip", "-o", "link").stdout
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if f"{CLUSTER}br" in line]
    rules = on_second_host("iptables-save").stdout
    found += [f"iptables rule {line}" for line in rules.splitlines() if f"gpucluster:{CLUSTER}:" in line]
    routes = on_second_host("ip", "-4", "route").stdout
    found += [f"route {line}" for line in routes.splitlines() if line.startswith("10.43.")]
    for path in (
        SECOND_STATE,
        "/run/gpucluster-e2e-h2-run/gpucluster-e2e",
        "/run/gpucluster-e2e-h2-run/gpucluster-e2e-dev",
        "/var/lib/gpucluster-host/ip_forward-netns-e2e-h2",
        str(SECOND_HOST.directory / "systemd-system" / f"gpucluster-{CLUSTER}.service"),
    ):
        if Path(path).exists():
            found.append(f"path {path}")
    found += [f"container {p.name}" for p in Path("/var/lib/lxc-e2e-h2").glob(f"{CLUSTER}-*")]
    ps = sh("ps", "-eo", "args=").stdout
    found += [f"process {line}" for line in ps.splitlines() if "gpucluster-e2e-h2" in line and "sshd" not in line]
    return found


def verify_second_host(config: dict) -> tuple[int, str]:
    """./verify.sh e2e h2, run on the second host."""
    cluster = parse_stack_config(config).cluster
    with tempfile.NamedTemporaryFile("w", suffix=".env") as expected:
        expected.write(render_host_state(cluster, cluster.host_named("h2")))
        expected.flush()
        done = on_second_host(
            *INTERPRETER, script(HOST_FILES / "verify_host.sh"), "verify_host.sh", expected.name, check=False
        )
    return done.returncode, done.stdout + done.stderr


def routes_survive_a_lost_route(config: dict, report: list[str]) -> None:
    """The second host's route to the first host's containers, lost (as at a reboot), is named
    by verify and brought back by that host's boot unit, exactly its ExecStart."""
    code, clean = verify_second_host(config)
    assert code == 0, clean
    on_second_host("ip", "route", "del", "10.43.3.0/24")
    code, drifted = verify_second_host(config)
    missing = [line for line in drifted.splitlines() if not line.startswith("ok ")]
    report.append("$ ./verify.sh e2e h2   (on h2, its route to h1's containers deleted)\n" + "\n".join(missing))
    assert code == 1 and any("MISSING  route 10.43.3.0/24 via 10.45.0.1" in line for line in missing), drifted
    unit = (SECOND_HOST.directory / "systemd-system" / f"gpucluster-{CLUSTER}.service").read_text()
    (exec_start,) = [line.removeprefix("ExecStart=") for line in unit.splitlines() if line.startswith("ExecStart=")]
    on_second_host(*shlex.split(exec_start), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    code, clean = verify_second_host(config)
    assert code == 0, clean
    report.append(
        f"$ {exec_start}   (on h2: its boot unit's ExecStart)\n$ ./verify.sh e2e h2\n{clean.splitlines()[-1]}"
    )
    assert sorted(sh("srun", "--chdir=/tmp", "-N4", "hostname", env=SLURM).stdout.split()) == [
        "c000", "c001", "c002", "c003"
    ]  # fmt: skip


def test_one_host_over_ssh_up_check_reapply_destroy(capsys):
    require_host()
    teardown()
    before = host_snapshot()
    report: list[str] = []
    try:
        server = ssh_hosts.start(SSH_HOST)
        config = one_ssh_host_config(server["host_key"])
        make_outside_namespace()
        run = run_program(config, stack=STACK, secrets={SECRET: server["client_key"]})
        commands = host_commands(run)
        assert commands and all(c.connection or makes_the_munge_key(c) for c in commands), (
            "a command of the SSH stack runs locally"
        )

        state = State()
        started = time.monotonic()
        first, _ = up(state, commands)
        bring_up = first.finished(f"{CLUSTER}-health")
        check_cluster(config, run.outputs, report)

        # Apply again: the engine finds nothing changed, nothing runs.
        _, actions = up(state, commands)
        assert changed(actions) == {}
        # Every create once more over SSH (a fresh stack against the running cluster, as after a
        # lost state) converges: no config rewritten, no Slurm daemon restarted. The fresh stack
        # brings a new generated munge key: each munged takes it (restarted), Slurm keeps going.
        config_files = {p: p.read_bytes() for p in Path("/var/lib/lxc").glob(f"{CLUSTER}-*/gpucluster.conf")}
        controller = pids(["pidof", "slurmctld"], ["c000"], {})
        again = apply(commands)
        assert {p: p.read_bytes() for p in config_files} == config_files
        assert pids(["pidof", "slurmctld"], ["c000"], {}) == controller, "a second apply restarted slurmctld"
        removal = destroy_state(state)
        total = time.monotonic() - started
    finally:
        remove_outside_namespace()
        teardown_ssh_stacks()
        remove_stand_in_gpus()

    assert leftovers(CLUSTER) == []
    after = host_snapshot()
    assert after == before, (
        {key: (before[key], after[key]) for key in before if before[key] != after[key]},
        sh("ps", "-eo", "pid,ppid,args").stdout if after["daemons"] != before["daemons"] else "",
    )
    with capsys.disabled():
        print("\n== one host over SSH (sshd -f on 127.0.0.1:2222, host key pinned) ==\n" + "\n".join(report))
        print(f"bring-up over SSH ({len(commands)} remote commands): {bring_up:.1f} s")
        print(f"every create again over SSH: {again.wall_seconds:.1f} s; destroy: {removal.wall_seconds:.1f} s")
        print(f"whole test {total:.0f} s")


def test_two_hosts_one_slurm(capsys):
    require_host()
    teardown()
    before = host_snapshot()
    report: list[str] = []
    state = State()
    lxc_path = {"c002": "/var/lib/lxc-e2e-h2", "c003": "/var/lib/lxc-e2e-h2"}
    try:
        server = ssh_hosts.start(SECOND_HOST)
        config = two_host_config(server["host_key"])
        secrets = {SECRET: server["client_key"]}
        # The shared directory stands in for a network filesystem mounted on every host.
        Path(SHARED_DIR).mkdir(parents=True, exist_ok=True)
        run = run_program(config, stack=STACK, secrets=secrets)
        commands = host_commands(run)
        remote = sorted(c.name for c in commands if c.connection)
        assert "e2e-h2-sshd-accept-env" in remote and "e2e-c002-lxc" in remote and "e2e-c000-lxc" not in remote

        started = time.monotonic()
        first, _ = up(state, commands)
        bring_up = first.finished(f"{CLUSTER}-health")
        nodes = ["c000", "c001", "c002", "c003"]

        sinfo = sh("sinfo", "-N", "-o", "%N %T %G %o", env=SLURM).stdout
        report.append("$ sinfo -N -o '%N %T %G %o'   (on h1)\n" + sinfo)
        idle = {line.split()[0] for line in sinfo.splitlines()[1:] if line.split()[1] == "idle"}
        assert idle == set(nodes), sinfo
        remote_sinfo = on_second_host(f"{SECOND_STATE}/bin/sinfo").stdout
        report.append(f"$ {SECOND_STATE}/bin/sinfo   (on h2, its own client: the image's, in c002)\n" + remote_sinfo)
        assert "idle" in remote_sinfo

        hostnames = sh("srun", "--chdir=/tmp", "-N4", "hostname", env=SLURM).stdout
        report.append("$ srun -N4 hostname\n" + hostnames)
        assert sorted(hostnames.split()) == nodes

        gpu = sh(
            "srun", "--chdir=/tmp", "-w", "c002", "--gres=gpu:1", "sh", "-c",
            'echo "$(hostname) CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; ls -l /dev/nvidia[0-9]*',
            env=SLURM,
        ).stdout  # fmt: skip
        report.append("$ srun -w c002 --gres=gpu:1 sh -c 'echo ... ; ls -l /dev/nvidia[0-9]*'   (a node of h2)\n" + gpu)
        assert gpu.startswith("c002 CUDA_VISIBLE_DEVICES=0") and " 195, " in gpu, gpu

        job = Path(SHARED_DIR) / "across-hosts.sh"
        job.write_text("#!/bin/sh\necho \"$(hostname): $(ip -4 -o addr show dev eth0 | awk '{print $4}')\"\n")
        job.chmod(0o755)
        try:
            ran = sh("srun", f"--chdir={SHARED_DIR}", "-N4", str(job), env=SLURM).stdout
        finally:
            job.unlink()
        ran = "".join(sorted(ran.splitlines(True)))
        report.append(f"$ srun -N4 {job}   (the script in the shared directory)\n" + ran)
        assert sorted(line.split(":")[0] for line in ran.splitlines()) == nodes
        assert "10.46.3." in ran and "10.43.3." in ran

        routes = (
            sh("ip", "-4", "route", "show", "10.46.3.0/24").stdout
            + on_second_host("ip", "-4", "route", "show", "10.43.3.0/24").stdout
        )
        report.append("routes (h1, then h2):\n" + routes)
        state_file = Path(f"{SECOND_STATE}/host-state.env").read_text()
        assert "ROUTES=10.43.3.0/24,10.45.0.1" in state_file, state_file
        routes_survive_a_lost_route(config, report)

        # The state holds the secrets encrypted only: neither the generated munge key nor the
        # SSH private key (set as the README tells a user) is in `pulumi stack export`.
        exported = state.engine.export()
        munge_key = base64.b64encode(Path(f"/var/lib/gpucluster/{CLUSTER}/munge.key").read_bytes()).decode()
        key_body = "".join(line for line in server["client_key"].splitlines() if "PRIVATE KEY" not in line)
        found = {"munge key": munge_key[:40] in exported, "SSH private key": key_body[:40] in exported}
        report.append("secrets found in `pulumi stack export`: " + ", ".join(f"{k}: {v}" for k, v in found.items()))
        assert not any(found.values()) and "PRIVATE KEY" not in exported, found
        assert '"ciphertext"' in exported, "the state holds the secrets encrypted"
        # A few KB per resource, whatever its script (the script store, over SSH too): its
        # inputs, the provider's echo of them and its output.
        entries = json.loads(exported)["deployment"]["resources"]
        # (not the stand-in GPUs, a test setting that runs before the store with its text)
        sizes = sorted(
            (len(json.dumps(entry)), entry["urn"].rsplit("::", 1)[1])
            for entry in entries
            if not entry["urn"].endswith("-stand-in-gpus")
        )
        report.append(f"state: {len(exported) / 1e3:.0f} KB for {len(entries)} resources, the largest {sizes[-3:]}")
        assert sizes[-1][0] <= STATE_PER_RESOURCE, sizes[-3:]

        # Apply again: nothing changes; every create once more converges on both hosts.
        _, actions = up(state, commands)
        assert changed(actions) == {}
        slurmd = pids(["pidof", "slurmd"], nodes, lxc_path)
        controller = pids(["pidof", "slurmctld"], ["c000"], lxc_path)
        again = apply(commands)
        assert pids(["pidof", "slurmd"], nodes, lxc_path) == slurmd, "a second apply restarted a slurmd"
        assert pids(["pidof", "slurmctld"], ["c000"], lxc_path) == controller

        # Remove the second host's nodes (and the host): a job running on h1 is left alone.
        running = sh("sbatch", "--parsable", "-w", "c001", "--chdir=/tmp", "--wrap", "sleep 600", env=SLURM).stdout
        running = running.strip()
        deadline = time.monotonic() + 60
        while sh("squeue", "-h", "-j", running, "-o", "%T", env=SLURM).stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, "the job does not start"
            time.sleep(0.5)
        kept = pids(["pidof", "slurmd"], ["c000", "c001"], lxc_path)
        one_host = two_host_config(server["host_key"], second=False)
        smaller = host_commands(run_program(one_host, stack=STACK, secrets=secrets))
        shrink, actions = up(state, smaller)
        deleted = sorted(name for name, action in actions.items() if action == "delete")
        assert all(name.startswith(("e2e-h2-", "e2e-c002-", "e2e-c003-", "e2e-h1-routes")) for name in deleted)
        assert "e2e-c002-lxc" in deleted and "e2e-h2-bridges-nat" in deleted and "e2e-h1-routes" in deleted
        assert sh("squeue", "-h", "-j", running, "-o", "%T", env=SLURM).stdout.strip() == "RUNNING", "the job died"
        assert pids(["pidof", "slurmd"], ["c000", "c001"], lxc_path) == kept
        after_shrink = sh("sinfo", "-N", "-o", "%N %T", env=SLURM).stdout
        report.append(
            f"remove h2 and its nodes while job {running} runs on c001: {shrink.wall_seconds:.1f} s\n"
            f"$ squeue -j {running} -o %T -h\nRUNNING\n$ sinfo -N -o '%N %T'\n{after_shrink}"
        )
        assert sorted(line.split()[0] for line in after_shrink.splitlines()[1:]) == ["c000", "c001"]
        assert second_host_leftovers() == []
        assert "10.46.3.0/24" not in sh("ip", "-4", "route").stdout
        sh("scancel", running, env=SLURM)
        removal = destroy_state(state)
        total = time.monotonic() - started
    finally:
        # Without SSH: the stack's deletes run on each host directly, whatever state sshd is in.
        teardown_ssh_stacks()
        remove_stand_in_gpus()

    assert leftovers(CLUSTER) == []
    after = host_snapshot()
    assert after == before, (
        {key: (before[key], after[key]) for key in before if before[key] != after[key]},
        sh("ps", "-eo", "pid,ppid,args").stdout if after["daemons"] != before["daemons"] else "",
    )
    with capsys.disabled():
        print("\n== two hosts: h1 local (c000 with slurmctld, c001), h2 over SSH in its own netns (c002, c003) ==")
        print("\n".join(report))
        print(f"bring-up of both hosts (clean hosts with packages -> health gate): {bring_up:.1f} s")
        slowest = sorted(first.steps, key=lambda s: -s.seconds)[:6]
        print("slowest creates: " + ", ".join(f"{s.name} {s.seconds:.1f}s" for s in slowest))
        print(f"every create again (both hosts): {again.wall_seconds:.1f} s; destroy: {removal.wall_seconds:.1f} s")
        print(f"whole test {total:.0f} s")


def test_a_host_that_died_is_retired_without_dialing_it(capsys):
    """The second host's machine dies (its link down, its sshd gone). `retired: true` alone runs
    nothing anywhere; removing the host then drops its commands from the state without
    dialing it, while the first host converges (Slurm forgets the dead nodes, the route to
    them goes, the health gate passes). The dead machine is cleaned by hand (the teardown)."""
    require_host()
    teardown()
    before = host_snapshot()
    report: list[str] = []
    state = State()
    try:
        server = ssh_hosts.start(SECOND_HOST)
        secrets = {SECRET: server["client_key"]}
        Path(SHARED_DIR).mkdir(parents=True, exist_ok=True)
        live = host_commands(run_program(two_host_config(server["host_key"]), stack=STACK, secrets=secrets))
        up(state, live)
        on_h2 = {c.name for c in live if c.connection}

        sh("ip", "link", "set", SECOND_HOST.links[0], "down")  # the machine is gone from the network
        ssh_hosts.stop_sshd(SECOND_HOST)

        retired = two_host_config(server["host_key"])
        retired["cluster"]["hosts"][1]["retired"] = True
        started = time.monotonic()
        # A short step timeout: a dial to the dead host would fail the step, not hang the test.
        timeline, actions = up(state, host_commands(run_program(retired, stack=STACK, secrets=secrets)), timeout=120)
        assert changed(actions) == {} and {step.phase for step in timeline.steps} == {"same"}
        report.append(f"retired: true -> {len(actions)} resources, all 'same', {time.monotonic() - started:.1f} s")

        gone = host_commands(
            run_program(two_host_config(server["host_key"], second=False), stack=STACK, secrets=secrets)
        )
        shrink, actions = up(state, gone, timeout=120)
        deleted = {name for name, action in actions.items() if action == "delete"}
        assert on_h2 <= deleted, on_h2 - deleted
        # Beside h2's commands, its script store's copy (no command: not in the harness's list).
        assert deleted - on_h2 == {f"{CLUSTER}-h1-routes", f"{CLUSTER}-h2-scripts"}
        assert not any(entry.command.connection for entry in state.resources.values())
        # Had any delete dialed h2, its link being down, the update would have failed.
        report.append(
            f"h2 removed: its {len(on_h2)} commands left the state without dialing it; "
            f"h1 converged in {shrink.wall_seconds:.1f} s: "
            + ", ".join(sorted(f"{n} {a}" for n, a in actions.items() if a not in ("same", "delete")))
        )
        sinfo = sh("sinfo", "-N", "-h", "-o", "%N %T", env=SLURM).stdout
        report.append("$ sinfo -N -h -o '%N %T'\n" + sinfo)
        assert sorted(line.split()[0] for line in sinfo.splitlines()) == ["c000", "c001"]
        assert sorted(sh("srun", "--chdir=/tmp", "-N2", "hostname", env=SLURM).stdout.split()) == ["c000", "c001"]
        assert "10.46.3.0/24" not in sh("ip", "-4", "route").stdout
        destroy_state(state)
    finally:
        teardown_ssh_stacks()  # cleans the dead host directly, as its operator would by hand
        remove_stand_in_gpus()

    assert leftovers(CLUSTER) == []
    assert host_snapshot() == before
    with capsys.disabled():
        print("\n== a dead host retired ==\n" + "\n".join(report))


def test_moves_between_two_ssh_hosts_leave_one_of_each_on_the_new_host(capsys):
    """Both hosts over SSH (h1: this machine through the test's sshd; h2: its namespace), so a
    move keeps the command's type: slurmctld moves from c000 (h1) to c002 (h2) and node c003
    from h2 to h1 in one update. Afterwards: one slurmctld, in c002; c003's container only on
    h1; every node idle, seen from both hosts' own Slurm clients; nothing of either left on the
    old host."""
    require_host()
    teardown()
    before = host_snapshot()
    report: list[str] = []
    state = State()
    h2_lxc = "/var/lib/lxc-e2e-h2"
    try:
        first, second = ssh_hosts.start(SSH_HOST), ssh_hosts.start(SECOND_HOST)
        secrets = {SECRET: second["client_key"], FIRST_HOST_SECRET: first["client_key"]}
        Path(SHARED_DIR).mkdir(parents=True, exist_ok=True)

        def program(moved: bool):
            config = two_ssh_hosts_config(first["host_key"], second["host_key"], moved=moved)
            return host_commands(run_program(config, stack=STACK, secrets=secrets))

        commands = program(False)
        assert all(c.connection or makes_the_munge_key(c) for c in commands), (
            "a command of the two SSH hosts runs locally"
        )
        started = time.monotonic()
        up(state, commands)
        bring_up = time.monotonic() - started
        assert pids(["pidof", "slurmctld"], ["c000"], {})["c000"]

        move, actions = up(state, program(True))
        report.append(
            f"move (slurmctld c000@h1 -> c002@h2, c003 h2 -> h1): {move.wall_seconds:.1f} s; "
            + ", ".join(sorted(f"{n} {a}" for n, a in actions.items() if a not in ("same", "update")))
        )
        assert actions["e2e-slurm-slurmctld"] == actions["e2e-c003-lxc"] == "replace"
        assert not [n for n, a in actions.items() if n.endswith("-slurm-client") and a != "update"]

        # Exactly one slurmctld on the machine (every container's processes are seen from
        # here), and it is c002's on h2; c003's container is on h1 only.
        slurmctlds = sh("pgrep", "-x", "slurmctld", check=False).stdout.split()
        report.append(f"$ pgrep -x slurmctld   (both hosts)\n{' '.join(slurmctlds)}")
        assert len(slurmctlds) == 1, slurmctlds
        assert pids(["pidof", "slurmctld"], ["c002"], {"c002": h2_lxc})["c002"]  # its pid in c002's namespace
        assert sh("lxc-attach", "-n", f"{CLUSTER}-c000", "--", "pidof", "slurmctld", check=False).returncode != 0
        assert not Path(f"{h2_lxc}/{CLUSTER}-c003").exists()
        assert Path(f"/var/lib/lxc/{CLUSTER}-c003").exists()
        assert sh("lxc-info", "-P", h2_lxc, "-n", f"{CLUSTER}-c003", check=False).returncode != 0
        # Both hosts keep their Slurm client, and see every node idle.
        h1_sinfo = sh("sinfo", "-N", "-h", "-o", "%N %T", env=SLURM).stdout
        h2_sinfo = on_second_host(f"{SECOND_STATE}/bin/sinfo", "-N", "-h", "-o", "%N %T").stdout
        report.append("$ sinfo -N -h -o '%N %T'   (on h1)\n" + h1_sinfo + "(on h2)\n" + h2_sinfo)
        for seen in (h1_sinfo, h2_sinfo):
            assert sorted(seen.split()) == sorted(["c000", "c001", "c002", "c003", *["idle"] * 4]), seen
        hostnames = sh("srun", "--chdir=/tmp", "-N4", "hostname", env=SLURM).stdout
        assert sorted(hostnames.split()) == ["c000", "c001", "c002", "c003"]
        removal = destroy_state(state)
        total = time.monotonic() - started
    finally:
        teardown_ssh_stacks()
        remove_stand_in_gpus()

    assert leftovers(CLUSTER) == []
    after = host_snapshot()
    assert after == before, (
        {key: (before[key], after[key]) for key in before if before[key] != after[key]},
        sh("ps", "-eo", "pid,ppid,args").stdout if after["daemons"] != before["daemons"] else "",
    )
    with capsys.disabled():
        print("\n== moves between two SSH hosts ==\n" + "\n".join(report))
        print(f"bring-up {bring_up:.0f} s; destroy {removal.wall_seconds:.1f} s; whole test {total:.0f} s")
