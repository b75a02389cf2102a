"""Stand-in SSH hosts on this machine, for the end-to-end tests of several hosts.

Each host has an sshd that the test starts with its own config file (`sshd -f`), port, host
key, authorized key and drop-in directory: the machine's own sshd and /etc/ssh are never
touched. A host with `netns` is a second machine made of a network namespace
(../shared/reference/second-host.md): its own links, bridges, routes, iptables rules and
ip_forward, joined to this machine by a veth pair (the "site network": the root side
forwards and masquerades for it, so the second host reaches Debian's mirror), and a
persistent mount namespace of its own in which
- only the network parts of /sys come from the namespace (so LXC sees its bridges while
  the cgroup mounts stay: `ip netns exec` would hide them, `nsenter --net` alone shows the
  wrong bridges),
- /etc/systemd/system is a directory of its own (a boot unit there is that host's).
Its sshd runs in both namespaces, so every command arriving over SSH acts there, lxc-start
included. Its LXC path, state and run directories are given by the stack (hosts[]).
"""

import ipaddress
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
ROOT_TAG = "gpucluster-e2e-site"  # the iptables comment of the site network's rules


@dataclass(frozen=True)
class SshHost:
    name: str
    address: str
    port: int
    netns: str | None = None
    site_address: str | None = None
    """This machine's address on the veth to the namespace (the other end is `address`)."""

    @property
    def directory(self) -> Path:
        """sshd's config, keys, pid file and log; the namespace's private mounts."""
        return Path(f"/run/gpucluster-e2e-{self.name}")

    @property
    def mount_ns(self) -> Path:
        return self.directory / "ns" / "mnt"

    @property
    def links(self) -> tuple[str, str]:
        return (f"e2e{self.name}a", f"e2e{self.name}b")

    @property
    def site_subnet(self) -> str:
        return str(ipaddress.ip_interface(f"{self.site_address}/30").network)


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def host_argv(host: SshHost) -> list[str]:
    """The prefix that runs a command on `host` without SSH (teardown after a failed run)."""
    if host.netns is None:
        return []
    ensure_namespaces(host)
    return ["nsenter", f"--net=/run/netns/{host.netns}", f"--mount={host.mount_ns}"]


def ensure_namespaces(host: SshHost) -> None:
    """The network namespace with its veth to this machine, and the persistent mount namespace."""
    if host.netns is None or host.mount_ns.exists():
        return
    outer, inner = host.links
    if not Path(f"/run/netns/{host.netns}").exists():
        sh("ip", "netns", "add", host.netns)
    sh("ip", "link", "del", outer, check=False)
    sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
    sh("ip", "link", "set", inner, "netns", host.netns)
    sh("ip", "addr", "add", f"{host.site_address}/30", "dev", outer)
    sh("ip", "link", "set", outer, "up")
    ns = ("ip", "netns", "exec", host.netns)
    sh(*ns, "ip", "addr", "add", f"{host.address}/30", "dev", inner)
    sh(*ns, "ip", "link", "set", inner, "up")
    sh(*ns, "ip", "link", "set", "lo", "up")
    sh(*ns, "ip", "route", "add", "default", "via", host.site_address)
    # The site network: this machine forwards and masquerades the second host's traffic out.
    record = host.directory / "site-ip-forward"
    host.directory.mkdir(parents=True, exist_ok=True)
    if not record.exists():
        record.write_text(Path("/proc/sys/net/ipv4/ip_forward").read_text())
    sh("sysctl", "-qw", "net.ipv4.ip_forward=1")
    for table, chain, rule in _site_rules(host):
        if sh("iptables", "-t", table, "-C", chain, *rule, check=False).returncode != 0:
            sh("iptables", "-t", table, "-I", chain, *rule)
    # A mount namespace kept by a bind mount of its file (on a private mount, as required).
    holder = host.mount_ns.parent
    holder.mkdir(parents=True, exist_ok=True)
    sh("mount", "--bind", str(holder), str(holder))
    sh("mount", "--make-private", str(holder))
    host.mount_ns.touch()
    sh("unshare", f"--mount={host.mount_ns}", "--propagation", "private", "true")
    sysfs, systemd = host.directory / "sys", host.directory / "systemd-system"
    sysfs.mkdir(exist_ok=True)
    systemd.mkdir(exist_ok=True)
    inside = ("nsenter", f"--net=/run/netns/{host.netns}", f"--mount={host.mount_ns}")
    sh(*inside, "mount", "-t", "sysfs", "sysfs", str(sysfs))
    sh(*inside, "mount", "--bind", f"{sysfs}/class/net", "/sys/class/net")
    sh(*inside, "mount", "--bind", f"{sysfs}/devices/virtual/net", "/sys/devices/virtual/net")
    sh(*inside, "mount", "--bind", str(systemd), "/etc/systemd/system")


def _site_rules(host: SshHost) -> list[tuple[str, str, list[str]]]:
    """(table, chain, rule) of the site network: masquerading out, forwarding both ways."""
    comment = ["-m", "comment", "--comment", f"{ROOT_TAG}:{host.name}"]
    # Out to the world only: into this machine's test bridges (e2e*) the second host keeps its
    # address, as between real hosts, so a node here answers srun there at that address.
    outward = ["!", "-o", "e2e+"]
    return [
        (
            "nat",
            "POSTROUTING",
            ["-s", host.site_subnet, "!", "-d", host.site_subnet, *outward, *comment, "-j", "MASQUERADE"],
        ),
        ("filter", "FORWARD", ["-i", host.links[0], *comment, "-j", "ACCEPT"]),
        ("filter", "FORWARD", ["-o", host.links[0], *comment, "-j", "ACCEPT"]),
    ]


def start(host: SshHost) -> dict:
    """Start the host's sshd (after its namespaces); returns its pid, pinned host key and the
    client's private key. Whatever a previous run left of it is removed first."""
    assert Path(SSHD).exists(), "openssh-server is missing: run `bash .ci/run`"
    stop_sshd(host)
    ensure_namespaces(host)
    config_dir = host.directory / "sshd"
    config_dir.mkdir(parents=True)
    (config_dir / "sshd_config.d").mkdir()
    for key in ("host_key", "client_key"):
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(config_dir / key))
    shutil.copy(config_dir / "client_key.pub", config_dir / "authorized_keys")
    (config_dir / "sshd_config").write_text(
        f"Include {config_dir}/sshd_config.d/*.conf\n"
        f"Port {host.port}\nListenAddress {host.address}\n"
        f"HostKey {config_dir}/host_key\nPidFile {config_dir}/sshd.pid\n"
        f"AuthorizedKeysFile {config_dir}/authorized_keys\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nMaxStartups 100\nMaxSessions 100\n"
        # As Debian's and Ubuntu's default sshd_config: the script store's copy is SFTP.
        "Subsystem sftp /usr/lib/openssh/sftp-server\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    prefix = ["nsenter", f"--net=/run/netns/{host.netns}", f"--mount={host.mount_ns}"] if host.netns else []
    sh(*prefix, SSHD, "-f", str(config_dir / "sshd_config"), "-E", str(config_dir / "sshd.log"))
    listening = [*(["ip", "netns", "exec", host.netns] if host.netns else []), "ss", "-Hltn"]
    deadline = time.monotonic() + 10
    while f"{host.address}:{host.port} " not in sh(*listening).stdout:
        assert time.monotonic() < deadline, f"the test sshd of {host.name} does not listen"
        time.sleep(0.1)
    return {
        "pid": (config_dir / "sshd.pid").read_text().strip(),
        "host_key": " ".join((config_dir / "host_key.pub").read_text().split()[:2]),
        "client_key": (config_dir / "client_key").read_text(),
    }


def stop_sshd(host: SshHost) -> None:
    """Stop the host's sshd (by its pid file, never by name) and remove its config."""
    config_dir = host.directory / "sshd"
    pid_file = config_dir / "sshd.pid"
    if pid_file.exists():
        pid = pid_file.read_text().strip()
        sh("kill", pid, check=False)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    shutil.rmtree(config_dir, ignore_errors=True)


def remove(host: SshHost) -> None:
    """The host gone: its sshd, mounts, namespaces, veth and the site network's rules. Run
    after the stack's destroy, which removed what the cluster made there."""
    stop_sshd(host)
    if host.netns is not None:
        if host.mount_ns.exists():
            sh("umount", str(host.mount_ns), check=False)
        if host.mount_ns.parent.exists():
            sh("umount", str(host.mount_ns.parent), check=False)
        sh("ip", "netns", "del", host.netns, check=False)
        sh("ip", "link", "del", host.links[0], check=False)
        comment = ["-m", "comment", "--comment", f"{ROOT_TAG}:{host.name}"]
        earlier = (
            "nat",
            "POSTROUTING",
            ["-s", host.site_subnet, "!", "-d", host.site_subnet, *comment, "-j", "MASQUERADE"],
        )
        for table, chain, rule in [*_site_rules(host), earlier]:  # `earlier`: the form older runs left
            while sh("iptables", "-t", table, "-D", chain, *rule, check=False).returncode == 0:
                pass
        record = host.directory / "site-ip-forward"
        if record.exists():
            sh("sysctl", "-qw", f"net.ipv4.ip_forward={record.read_text().strip()}")
    shutil.rmtree(host.directory, ignore_errors=True)
