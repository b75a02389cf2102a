"""Property: every cluster config the model accepts works in Slurm 22.05 and LXC 5.

Hypothesis generates configs (names, counts, partitions with times and flags, GPUs, paths,
ports, addresses; plausible and hostile values mixed). A config the model refuses must name
the field of each problem; a config it accepts is rendered, and the real `slurmctld` must
start on its slurm.conf + gres.conf (in a private network and UTS namespace, with its own
state/pid/log paths, ended by pid) and `lxc-info` must load every container's LXC config.
A second property applies one hostile change of each class to a good config and asserts the
model refuses it, naming the field. Needs root (slurmctld, namespaces): run by .ci/run.
"""

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.composition.config import ClusterConfig
from components.composition.stack_config import ConfigError, parse_stack_config
from components.host.rules import KERNEL_AND_CONFIG_TREES, SYSTEM_DIRS
from components.lxc.lxc_conf import ContainerSpec, render_lxc_config
from components.lxc.rules import INTERNAL_CONTAINER_NAMES
from components.network.rules import SLURM_PORTS
from components.slurm.config import SLURM_RESERVED_NODE_NAMES
from components.slurm.slurm_conf import render_gres_conf
from tests.harness.program_harness import slurm_conf_of
from tests.lxc.test_lxc_conf import lxc_loads

# Network and UTS namespaces (unshare) for every generated config.
pytestmark = pytest.mark.privileged

# slurmctld's error lines that say nothing about the config: a fresh state directory, a
# Debian build without PMIx, a busy machine's clock check.
BENIGN_ERRORS = re.compile(
    r"Could not open \w+ state file|NOTE: Trying backup state save file|mpi/pmix|MPI: Cannot create context"
    r"|High latency for \d+ calls to gettimeofday"
)
READY = "Running as primary controller"


# ---- generated configs: plausible values, and in some examples hostile ones mixed in ----

LABEL = st.from_regex(r"[a-z][a-z0-9-]{0,61}[a-z0-9]", fullmatch=True)
NODE_NAME = st.one_of(
    st.builds("c{:03d}".format, st.integers(0, 999)),
    st.from_regex(r"[a-z]{1,4}[0-9]{1,3}", fullmatch=True),
    st.from_regex(r"[a-z]{1,3}[0-9]{1,2}[a-z-]{1,3}[0-9]{0,2}", fullmatch=True).filter(lambda s: not s.endswith("-")),
    LABEL,
)
BAD_NODE_NAME = st.sampled_from(
    ["default", "DEFAULT", "All", "localhost", "image", "c[1-2]", "c,1", "c 1", "c\u0661", "c1\n", "-c1", "x" * 64]
)
INT_LIKE = st.sampled_from(["2", 2.0, True, None, -1])
PORT = st.integers(1024, 65535).filter(lambda p: p not in SLURM_PORTS)
BAD_PORT = st.sampled_from([22, 53, 80, 443, 6817, 6818, 6819, 0, 65536, "7000", 7000.0, True])
TIME_PART = st.integers(0, 99999)
MAX_TIME = st.one_of(
    st.sampled_from(["INFINITE", "UNLIMITED", "0", "1-00:00:00"]),
    st.builds("{}".format, TIME_PART),
    st.builds("{}:{:02d}".format, TIME_PART, st.integers(0, 59)),
    st.builds("{}:{:02d}:{:02d}".format, st.integers(0, 999), st.integers(0, 59), st.integers(0, 59)),
    st.builds("{}-{}".format, st.integers(0, 30000), st.integers(0, 23)),
    st.builds("{}-{}:{:02d}".format, st.integers(0, 30000), st.integers(0, 23), st.integers(0, 59)),
    st.builds("{}-{}:{:02d}:{:02d}".format, st.integers(0, 24855), *[st.integers(0, 99)] * 3),
)
BAD_MAX_TIME = st.sampled_from(["forever", "-1", "1:2:3:4", "1-", "\u0661\u0662", "1-2-3", "infinite", " 5", 5])
DIR = st.from_regex(r"/(srv|opt|data|var/lib)/[a-z0-9]{1,8}(/[a-z0-9._-]{1,8})?", fullmatch=True).filter(
    lambda d: "/." not in d
)
HOSTILE_DIR = st.one_of(
    st.sampled_from(sorted(SYSTEM_DIRS)),
    st.builds("{}/x".format, st.sampled_from(KERNEL_AND_CONFIG_TREES)),
    st.sampled_from(["/var/lib/gpucluster", "/tmp/../etc", "/srv/a b", "srv", "/srv/./x", "/var/lib/lxc/x"]),
)


@st.composite
def raw_clusters(draw) -> dict:
    # A third of the examples are hostile: each field then has a one-in-four chance of a bad value.
    hostile = draw(st.integers(0, 2)) == 0

    def pick(good, *bad):
        return draw(st.one_of(good, good, good, *bad) if hostile and bad else good)

    name = pick(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), st.sampled_from(["Gpu", "a-b", ""]))
    names = draw(st.lists(NODE_NAME, min_size=1, max_size=5, unique=True))
    if hostile:
        names = [pick(st.just(node), BAD_NODE_NAME) for node in names]
    nodes = [
        {
            "name": node,
            "nat_address": pick(st.just(f"10.77.3.{i + 2}"), st.sampled_from(["10.77.3.1", "10.77.4.2"])),
            "cluster_address": f"10.77.5.{i + 1}",
            "gpus": pick(st.integers(0, 2), INT_LIKE),
            "cpus": pick(st.integers(1, 8), INT_LIKE, st.just(0)),
            "memory_mb": pick(st.integers(64, 65536), INT_LIKE, st.just(63)),
        }
        for i, node in enumerate(names)
    ]
    for node in nodes:
        if node["gpus"] == 1:  # shards split a node's own GPUs (a node without any is refused)
            node["gpu_shards"] = pick(st.integers(0, 8), st.just("2"))
    wanted = sum(n["gpus"] for n in nodes if isinstance(n["gpus"], int))
    gpu_count = max(wanted, 1)
    device_dir = draw(st.sampled_from(["/dev", f"/run/gpucluster-{name}-dev"]))
    devices = pick(
        st.just([f"{device_dir}/nvidia{i}" for i in range(gpu_count)]), st.lists(HOSTILE_DIR, min_size=1, max_size=2)
    )
    partitions = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "name": LABEL.filter(lambda n: n != "default"),
                    "max_time": MAX_TIME,
                    "oversubscribe": st.sampled_from(["NO", "YES", "FORCE", "EXCLUSIVE"]),
                    "nodes": st.one_of(st.none(), st.lists(st.sampled_from(names), min_size=1, unique=True)),
                }
            ),
            min_size=1,
            max_size=3,
            unique_by=lambda p: p["name"],
        )
    )
    for i, partition in enumerate(partitions):
        partition["default"] = pick(st.just(i == 0), st.booleans())
        partition["max_time"] = pick(st.just(partition["max_time"]), BAD_MAX_TIME)
        partition["name"] = pick(st.just(partition["name"]), st.sampled_from(["default", "Default", "a b"]))
        partition["oversubscribe"] = pick(st.just(partition["oversubscribe"]), st.just("yes"))
    placement = draw(st.sampled_from(["container", "host"]))
    controller = {"placement": placement}
    if placement == "container":
        controller["node"] = pick(st.sampled_from(names), st.just("nope"))
    cluster = {
        "name": name,
        "host": {
            "shared_dir": pick(st.one_of(st.just(f"/srv/gpucluster/{name}/shared"), DIR), HOSTILE_DIR),
            "state_dir": pick(st.just("/var/lib/gpucluster"), HOSTILE_DIR),
        },
        "network": {
            "nat_bridge": {"name": "pbr0", "address": "10.77.3.1/24"},
            "cluster_bridge": {"name": "pbr1", "subnet": "10.77.5.0/24"},
        },
        "gpu": {
            "devices": devices,
            "cuda_path": pick(st.sampled_from(["/usr/local/cuda", "/opt/cuda", None]), HOSTILE_DIR),
        },
        "nodes": nodes,
        "slurm": {"controller": controller, "partitions": partitions},
        "forwards": [
            {"host_port": pick(PORT, BAD_PORT), "target": pick(st.sampled_from(names), st.just("nope")), "port": 22}
            for _ in range(draw(st.integers(0, 2)))
        ],
    }
    if draw(st.booleans()):
        cluster["web_app"] = {
            "name": pick(st.just("web"), BAD_NODE_NAME),
            "nat_address": "10.77.3.200",
            "port": pick(st.integers(1, 65535), INT_LIKE),
            "host_port": pick(PORT, BAD_PORT),
        }
    return cluster


# ---- the real slurmctld, briefly, in its own namespaces ----


@pytest.fixture(scope="module")
def slurm_sandbox():
    """A directory the slurm user can use, and a munged on a private socket (slurmctld asks
    munge for a credential at start); both removed after the module, munged ended by pid."""
    assert os.geteuid() == 0, "the property test needs root (slurmctld, network namespaces)"
    missing = [tool for tool in ("slurmctld", "munged", "unshare", "ip", "lxc-info") if not shutil.which(tool)]
    assert not missing, f"missing {missing}: run `bash .ci/run` (installs slurmctld, munge, lxc)"
    base = Path(tempfile.mkdtemp(prefix="gpucluster-property-"))
    base.chmod(0o755)
    key = base / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munged = subprocess.Popen(
        [
            *("munged", "-F", "--force", f"--socket={base}/munge.socket", f"--key-file={key}"),
            *(f"--pid-file={base}/munged.pid", f"--seed-file={base}/munged.seed", f"--log-file={base}/munged.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while not (base / "munge.socket").exists():
            assert munged.poll() is None and time.monotonic() < deadline, "the private munged did not start"
            time.sleep(0.1)
        yield base
    finally:
        munged.terminate()
        munged.wait(timeout=15)
        shutil.rmtree(base)


def slurmctld_verdict(sandbox: Path, config: ClusterConfig, hostname: str, slurm_conf: str, gres_conf: str) -> str:
    """'' when slurmctld reads the config and runs as primary controller; else its complaint."""
    run = Path(tempfile.mkdtemp(prefix="run-", dir=sandbox))
    slurm = pwd.getpwnam("slurm")
    state = run / "state"
    state.mkdir()
    for path in (run, state):
        path.chmod(0o755)
        os.chown(path, slurm.pw_uid, slurm.pw_gid)
    private = {
        "StateSaveLocation": state,
        "SlurmctldPidFile": run / "slurmctld.pid",
        "SlurmctldLogFile": run / "slurmctld.log",
        "AuthInfo": f"socket={sandbox}/munge.socket",
    }
    lines = []
    for line in slurm_conf.splitlines():
        key = line.split("=", 1)[0]
        lines.append(f"{key}={private[key]}" if key in private else line)
    conf = run / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    (run / "gres.conf").write_text(gres_conf)
    # slurmctld must believe it is the SlurmctldHost (UTS namespace) and have that address
    # on an interface (getaddrinfo's AI_ADDRCONFIG); nothing it does reaches the host's network.
    setup = (
        'hostname "$1" && ip link set lo up && ip link add v0 type veth peer name v1 && '
        'ip addr add "$2/32" dev v0 && ip link set v0 up && ip link set v1 up && exec slurmctld -D -f "$3"'
    )
    log = run / "slurmctld.log"
    process = subprocess.Popen(
        ["unshare", "--net", "--uts", "sh", "-c", setup, "sh", hostname, str(config.controller_address), str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while process.poll() is None and time.monotonic() < deadline:
            if log.exists() and READY in log.read_text(errors="replace"):
                break
            time.sleep(0.05)
        alive = process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    shutil.rmtree(run)
    if not lines:
        return f"slurmctld wrote no log: {process.stderr.read()}"
    complaints = [line for line in lines if ("error:" in line or "fatal:" in line) and not BENIGN_ERRORS.search(line)]
    ready = any(READY in line for line in lines)
    if complaints or not ready or not alive:
        return "\n".join(complaints or lines[-10:])
    return ""


def test_every_accepted_config_works_in_slurm_and_lxc(slurm_sandbox, capsys):
    judged: Counter = Counter()

    @settings(
        max_examples=int(os.environ.get("CONFIG_PROPERTY_EXAMPLES", "300")),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(raw=raw_clusters())
    def check(raw: dict) -> None:
        judged["examples"] += 1
        try:
            config = parse_stack_config({"cluster": raw}).cluster
        except ConfigError as error:
            judged["refused"] += 1
            # Field errors and rule errors; at the end, maybe the note on rules not checked yet.
            problems = [line for line in str(error).splitlines()[1:] if not line.endswith("more may follow)")]
            assert problems and all(line.startswith("  - cluster") for line in problems), str(error)
            return
        hostname = config.controller_node.name if config.controller_node else "gpuhost"
        slurm_conf = slurm_conf_of(config, hostname)
        complaint = slurmctld_verdict(slurm_sandbox, config, hostname, slurm_conf, render_gres_conf(config))
        assert complaint == "", f"slurmctld refused an accepted config:\n{complaint}\n{slurm_conf}"
        judged["slurmctld"] += 1
        gpus = config.gpu_assignment()
        containers = [(n.name, n.nat_address, n.cluster_address, gpus[n.name], n.cpus) for n in config.nodes]
        if config.web_app:
            containers.append((config.web_app.name, config.web_app.nat_address, None, list(config.web_app.gpus), None))
        for name, nat, cluster, devices, cpus in containers:
            spec = ContainerSpec(name, nat, cluster, devices, cpus)
            text = render_lxc_config(
                spec, config.network, config.gpu, config.host.shared_dir, config.container_name(name)
            )
            with tempfile.TemporaryDirectory() as tmp:
                done = lxc_loads(text, Path(tmp))
            assert done.returncode == 0, f"LXC refused the config of {name}: {done.stderr}\n{text}"
            judged["lxc"] += 1

    started = time.monotonic()
    check()
    with capsys.disabled():
        print(
            f"\nconfig property: {judged['examples']} examples in {time.monotonic() - started:.0f} s, "
            f"{judged['refused']} refused by the model (each naming its field), {judged['slurmctld']} accepted "
            f"configs judged by slurmctld 22.05, {judged['lxc']} container configs loaded by lxc-info"
        )
    # The generator must reach slurmctld often enough for the property to mean something.
    assert judged["slurmctld"] >= judged["examples"] // 10, dict(judged)


# ---- hostile changes the model must refuse, naming the field ----


def good_cluster() -> dict:
    return {
        "name": "prop",
        "host": {"shared_dir": "/srv/gpucluster/prop/shared"},
        "network": {
            "nat_bridge": {"name": "pbr0", "address": "10.77.3.1/24"},
            "cluster_bridge": {"name": "pbr1", "subnet": "10.77.5.0/24"},
        },
        "gpu": {"devices": ["/dev/nvidia0", "/dev/nvidia1"]},
        "nodes": [
            {"name": "c000", "nat_address": "10.77.3.2", "cluster_address": "10.77.5.1"},
            {"name": "c001", "nat_address": "10.77.3.3", "cluster_address": "10.77.5.2"},
        ],
        "web_app": {"name": "web", "nat_address": "10.77.3.10"},
    }


def _mixed_case(word: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda upper: "".join(c.upper() if u else c for c, u in zip(word, upper, strict=True))
    )


NON_ASCII_DIGIT = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())
COERCED_INT = st.one_of(st.integers(1, 8).map(str), st.integers(1, 8).map(float), st.booleans())

# (field the message must name, where to put the value, strategy of hostile values)
HOSTILE = [
    ("nodes[1].name", ("nodes", 1, "name"), st.sampled_from(sorted(SLURM_RESERVED_NODE_NAMES)).flatmap(_mixed_case)),
    ("nodes[0].name", ("nodes", 0, "name"), st.sampled_from(sorted(INTERNAL_CONTAINER_NAMES))),
    ("nodes[0].name", ("nodes", 0, "name"), st.from_regex(r"c[0-9]?[\[\],. _/;\n][0-9]?", fullmatch=True)),
    ("web_app.name", ("web_app", "name"), st.sampled_from(sorted(INTERNAL_CONTAINER_NAMES))),
    ("slurm.partitions[0].name", ("slurm", "partitions"), _mixed_case("default").map(lambda n: [{"name": n}])),
    (
        "slurm.partitions[0].max_time",
        ("slurm", "partitions"),
        st.builds(
            lambda d, form: [{"name": "p", "default": True, "max_time": form.format(d=d)}],
            NON_ASCII_DIGIT,
            st.sampled_from(["{d}", "1{d}", "1-{d}", "1:{d}0", "{d}-1:00:00"]),
        ),
    ),
    ("host.shared_dir", ("host", "shared_dir"), HOSTILE_DIR),
    ("host.state_dir", ("host", "state_dir"), HOSTILE_DIR.filter(lambda d: d != "/var/lib/gpucluster")),
    ("gpu.cuda_path", ("gpu", "cuda_path"), HOSTILE_DIR),
    ("gpu.devices", ("gpu", "devices"), st.lists(HOSTILE_DIR, min_size=2, max_size=2)),
    (
        "gpu.devices",
        ("gpu", "devices"),
        st.from_regex(r"/(srv|tmp|var/lib)/nvidia[0-9]", fullmatch=True).map(lambda p: [p, "/dev/nvidia1"]),
    ),
    (
        "gpu.control_devices",
        ("gpu", "control_devices"),
        st.sampled_from(["/dev/sda", "/dev/mem", "/dev/kmsg"]).map(lambda p: [p]),
    ),
    (
        "gpu.driver_files",
        ("gpu", "driver_files"),
        st.sampled_from(["/etc/*", "/etc/shadow*", "/root/.ssh/*", "/*", "/usr/*/lib*"]).map(lambda p: [p]),
    ),
    (
        "web_app.host_port",
        ("web_app", "host_port"),
        st.one_of(st.integers(1, 1023), st.sampled_from(sorted(SLURM_PORTS))),
    ),
    ("web_app.host_port", ("web_app", "host_port"), COERCED_INT),
    ("nodes[0].gpus", ("nodes", 0, "gpus"), COERCED_INT),
    ("nodes[1].cpus", ("nodes", 1, "cpus"), COERCED_INT),
    ("web_app.max_concurrent_jobs", ("web_app", "max_concurrent_jobs"), COERCED_INT),
    ("gpu.share_between_nodes", ("gpu", "share_between_nodes"), st.sampled_from(["yes", "true", 1, 0, True])),
]


@settings(max_examples=int(os.environ.get("CONFIG_HOSTILE_EXAMPLES", "300")), deadline=None)
@given(case=st.sampled_from(range(len(HOSTILE))).flatmap(lambda i: st.tuples(st.just(i), HOSTILE[i][2])))
def test_hostile_values_are_refused_naming_the_field(case):
    index, value = case
    field, path, _ = HOSTILE[index]
    cluster = good_cluster()
    target = cluster
    for part in path[:-1]:
        target = target.setdefault(part, {}) if isinstance(part, str) else target[part]
    target[path[-1]] = value
    with pytest.raises(ConfigError) as caught:
        parse_stack_config({"cluster": cluster})
    assert f"cluster.{field}" in str(caught.value), (value, str(caught.value))


def test_the_good_base_of_the_hostile_cases_is_accepted():
    parse_stack_config({"cluster": good_cluster()})


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        # What the model now refuses or renders differently, given to slurmctld as it was.
        (("Nodes=c1a,c2a", "Nodes=c[1-2]a"), "c[1-2]a"),
        (("MaxTime=INFINITE", "MaxTime=99999999999"), "MaxTime"),
        (("NodeName=c2a", "NodeName=ALL"), "ALL"),
    ],
)
def test_the_slurmctld_judge_can_fail(slurm_sandbox, change, complaint):
    raw = good_cluster()
    raw["nodes"][0]["name"], raw["nodes"][1]["name"] = "c1a", "c2a"
    config = parse_stack_config({"cluster": raw}).cluster
    slurm_conf = slurm_conf_of(config, "c1a")
    assert change[0] in slurm_conf
    good = slurmctld_verdict(slurm_sandbox, config, "c1a", slurm_conf, render_gres_conf(config))
    assert good == ""
    bad = slurmctld_verdict(slurm_sandbox, config, "c1a", slurm_conf.replace(*change), render_gres_conf(config))
    assert complaint in bad, bad
