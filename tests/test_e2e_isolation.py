"""End-to-end isolation checks, run by tests/test_e2e.py on the cluster it brought up.

- GPUs: in a node, its own stand-in GPU opens as far as the kernel goes (ENXIO: no driver
  behind major 195 here) while another GPU's node, made with mknod inside the container,
  is refused by the devices cgroup (EPERM); root in the container cannot allow it itself.
- Forward: its rules are on top of their chains; a rule inserted above them by hand makes
  the forward check and verify fail naming that chain, and removing it clears them. The
  stack limits the web app's forward to the outside client's network: the same client from
  another address is not forwarded.
- Routed traffic: with the NAT subnet routed via the host, the outside client is refused at the
  web app's own port and a node's slurmd; the forward still answers.
"""

import json
import os
import subprocess
from pathlib import Path

from components.common.transport import helpers
from components.composition.stack_config import parse_stack_config
from tests.harness.e2e_teardown import OUTSIDE_LINK, OUTSIDE_NS
from tests.test_e2e_lifecycle import run_verify

# Runs in a container (the node image has python3): open each device, say what happened.
PROBE = r"""
import errno, json, os, sys
results = []
def attempt(what, action):
    try:
        action()
        results.append([what, "ok"])
    except OSError as error:
        results.append([what, errno.errorcode[error.errno]])
def opener(path):
    return lambda: os.close(os.open(path, os.O_RDWR))
def allow_all():
    with open("/sys/fs/cgroup/devices/devices.allow", "w") as allow:
        allow.write("c 195:* rwm")
own, foreign = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for path in own:
    attempt(f"open {path} (own)", opener(path))
for index, (major, minor) in enumerate(foreign):
    path = f"/tmp/foreign-gpu{index}"
    if os.path.exists(path):
        os.unlink(path)
    attempt(f"mknod {path} c {major} {minor}", lambda: os.mknod(path, 0o20666, os.makedev(major, minor)))
    attempt(f"open {path} ({major}:{minor}, not ours)", opener(path))
attempt("write 'c 195:* rwm' to the container's devices.allow", allow_all)
for index, (major, minor) in enumerate(foreign):
    attempt(f"open /tmp/foreign-gpu{index} again", opener(f"/tmp/foreign-gpu{index}"))
    os.unlink(f"/tmp/foreign-gpu{index}")
print(json.dumps(results))
"""


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=120)


def _numbers(path: str) -> tuple[int, int]:
    rdev = Path(path).stat().st_rdev
    return os.major(rdev), os.minor(rdev)


def _probe(container: str, own: list[str], foreign: list[tuple[int, int]]) -> list[list[str]]:
    done = _sh("lxc-attach", "-n", container, "--", "python3", "-c", PROBE, json.dumps(own), json.dumps(foreign))
    return json.loads(done.stdout)


def gpus_are_isolated(config: dict, report: list[str]) -> None:
    """Each node opens only its own GPU; the web app only its own."""
    cluster = config["cluster"]
    # The parsed config: with gpu.stand_in the devices are the program's stand-ins.
    gpu = parse_stack_config(config).cluster.gpu
    name, devices = cluster["name"], gpu.devices
    web = cluster["web_app"]
    # Node i has device i (one each); the web app has its own, after the nodes' devices.
    node_devices = [d for d in devices if d not in web["gpus"]]
    checks = [
        (f"{name}-{node['name']}", [node_devices[i]], [d for d in devices if d != node_devices[i]])
        for i, node in enumerate(cluster["nodes"][:2])
    ]
    checks.append((f"{name}-{web['name']}", web["gpus"], node_devices[:1]))
    for container, own, foreign in checks:
        inside = [f"/dev/{Path(path).name}" for path in own] + ["/dev/" + Path(gpu.control_devices[0]).name]
        results = _probe(container, inside, [_numbers(path) for path in foreign])
        report.append(f"$ lxc-attach -n {container} -- python3 (open/mknod probe)")
        report += [f"  {what}: {outcome}" for what, outcome in results]
        outcomes = dict(results)
        for path in inside:
            assert outcomes[f"open {path} (own)"] == "ENXIO", results  # allowed; no driver behind it
        opened_foreign = {what: outcome for what, outcome in results if "not ours" in what or "again" in what}
        assert opened_foreign and set(opened_foreign.values()) == {"EPERM"}, results
        assert outcomes["write 'c 195:* rwm' to the container's devices.allow"] in {"EPERM", "EACCES", "EROFS"}, results
        assert all(outcome == "ok" for what, outcome in results if what.startswith("mknod")), results


def _forward(config: dict) -> tuple[str, str, str, str]:
    cluster = config["cluster"]
    web = cluster["web_app"]
    tag = f"gpucluster:{cluster['name']}:fwd:{web['host_port']}"
    return tag, str(web["host_port"]), web["nat_address"], str(web["port"])


def _forward_check(config: dict) -> subprocess.CompletedProcess:
    script = helpers() + '\nforward_check "$@"\necho "forward ok"\n'
    return subprocess.run(
        ["/bin/bash", "-c", script, "forward_check", *_forward(config), ""],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _first_rules(tag: str, report: list[str]) -> None:
    for table, chain in (("nat", "PREROUTING"), ("nat", "OUTPUT"), ("filter", "FORWARD")):
        rules = [r for r in _sh("iptables", "-t", table, "-S", chain).stdout.splitlines() if r.startswith("-A ")]
        report.append(f"$ iptables -t {table} -S {chain}\n" + "\n".join(rules))
        assert rules and tag in rules[0], f"the forward's rule is not on top of {table} {chain}: {rules}"


def shadowed_forward_is_named(config: dict, report: list[str]) -> None:
    tag, host_port, address, port = _forward(config)
    _first_rules(tag, report)
    done = _forward_check(config)
    assert done.returncode == 0 and "forward ok" in done.stdout, done.stderr

    shadows = [
        ("filter", "FORWARD", ["-p", "tcp", "-d", address, "--dport", port, "-j", "DROP"]),
        ("nat", "PREROUTING", ["-p", "tcp", "--dport", host_port, "-j", "DNAT", "--to-destination", f"{address}:1"]),
    ]
    for table, chain, rule in shadows:
        _sh("iptables", "-t", table, "-I", chain, "1", *rule)
        try:
            report.append(f"$ iptables -t {table} -I {chain} 1 {' '.join(rule)}   (by hand)")
            done = _forward_check(config)
            report.append(f"forward check (exit {done.returncode}): {done.stderr.strip()}")
            assert done.returncode != 0 and f"{table} {chain}: rule 1 " in done.stderr, done.stderr
            code, output = run_verify(config)
            shadowed = [line for line in output.splitlines() if line.startswith("SHADOWED")]
            report.append(f"$ ./verify.sh e2e   (exit {code})\n" + "\n".join(shadowed))
            assert code == 1 and len(shadowed) == 1 and f"{table} {chain}: rule 1 " in shadowed[0], output
        finally:
            _sh("iptables", "-t", table, "-D", chain, *rule)
    done = _forward_check(config)
    assert done.returncode == 0, done.stderr
    code, output = run_verify(config)
    assert code == 0, output
    report.append("hand-made rules removed: forward check and ./verify.sh e2e pass again")


def sources_are_limited(config: dict, report: list[str]) -> None:
    """The outside client (10.44.0.2, allowed) is forwarded; from 10.45.0.2 it is not."""
    port = config["cluster"]["web_app"]["host_port"]
    assert config["cluster"]["web_app"]["allowed_sources"] == ["10.44.0.0/30"]
    ns = ("ip", "netns", "exec", OUTSIDE_NS)
    _sh("ip", "addr", "add", "10.45.0.1/24", "dev", OUTSIDE_LINK)
    _sh(*ns, "ip", "addr", "add", "10.45.0.2/24", "dev", "e2e-out1")
    try:
        curl = (*ns, "curl", "-sS", "--max-time", "10")
        allowed = _sh(*curl, f"http://10.44.0.1:{port}/healthz", check=False)
        other = _sh(*curl, "--interface", "10.45.0.2", f"http://10.45.0.1:{port}/healthz", check=False)
        report.append(f"$ ip netns exec {OUTSIDE_NS} curl http://10.44.0.1:{port}/healthz   (from 10.44.0.2)")
        report.append(f"  exit {allowed.returncode}: {allowed.stdout.strip()}")
        report.append(f"$ ip netns exec {OUTSIDE_NS} curl --interface 10.45.0.2 http://10.45.0.1:{port}/healthz")
        report.append(f"  exit {other.returncode}: {other.stderr.strip()}")
        assert allowed.returncode == 0 and json.loads(allowed.stdout) == {"status": "ok"}, allowed
        # Not DNATed: the host itself answers, and nothing listens on the host port.
        assert other.returncode == 7 and "connect" in other.stderr.lower(), other  # curl: couldn't connect
    finally:
        _sh("ip", "addr", "del", "10.45.0.1/24", "dev", OUTSIDE_LINK, check=False)


def routed_subnet_is_refused(config: dict, report: list[str]) -> None:
    """The outside client routes the NAT subnet via the host (as a site router would for burst):
    the web app's own port and a node's slurmd are refused (components/files/lib/bridges.sh
    inbound_rules), while the forward still answers."""
    cluster = config["cluster"]
    web, subnet = cluster["web_app"], cluster["network"]["nat_bridge"]["address"]
    subnet = subnet.rsplit(".", 1)[0] + ".0/24"
    ns = ("ip", "netns", "exec", OUTSIDE_NS)
    _sh(*ns, "ip", "route", "add", subnet, "via", "10.44.0.1")
    try:
        curl = (*ns, "curl", "-sS", "--max-time", "10")
        direct = _sh(*curl, f"http://{web['nat_address']}:{web['port']}/healthz", check=False)
        slurmd = _sh(*curl, f"telnet://{cluster['nodes'][1]['nat_address']}:6818", check=False)
        forwarded = _sh(*curl, f"http://10.44.0.1:{web['host_port']}/healthz", check=False)
    finally:
        _sh(*ns, "ip", "route", "del", subnet, check=False)
    report.append(f"$ ip netns exec {OUTSIDE_NS} ip route add {subnet} via 10.44.0.1   (routed via the host)")
    target = f"{web['nat_address']}:{web['port']}"
    report.append(f"  curl http://{target}/healthz: exit {direct.returncode} {direct.stderr.strip()}")
    report.append(f"  curl http://10.44.0.1:{web['host_port']}/healthz: exit {forwarded.returncode}")
    # curl exit 7: could not connect (the REJECT answers at once; open would be 0, dropped 28)
    assert direct.returncode == 7, direct
    assert slurmd.returncode == 7, slurmd
    assert forwarded.returncode == 0 and json.loads(forwarded.stdout) == {"status": "ok"}, forwarded
