"""The firewall guards (components/files/lib/guards.sh): their rule lines, and, in network
namespaces of their own, real connections refused from a node container while Prometheus's
container, the host and other ports still get through."""

import os
import subprocess

import pytest

from components.common.transport import INTERPRETER, helpers
from tests.network.netns_scene import run_scene

EXPORTER = "gpucluster:t:guard:exporter,exporter,10.43.3.1,9481,10.43.3.30"
SITE_NFS = "gpucluster:t:guard:nfs,nfs,192.168.10.11,2049,10.43.3.0/24+10.45.0.0/24"
SERVED_NFS = "gpucluster:t:guard:nfs,nfs,192.168.10.1,2049,10.43.3.0/24+10.45.0.0/24,input"
# A one-host stack serving its export at its NAT bridge address (burst nodes mount it): the
# host mounts it from that address, over lo, with a source inside the NAT subnet.
BRIDGE_NFS = "gpucluster:t:guard:nfsbr,nfs,10.43.3.1,2049,10.43.3.0/24,input"


def bash(text: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*INTERPRETER, f"{helpers()}\n{text}", "test", *argv],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"]},
        timeout=120,
    )


def test_the_rule_lines_of_each_guard():
    done = bash('guard_rules "$1"; guard_rules "$2"', EXPORTER, SERVED_NFS)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "filter INPUT ! -i lo -d 10.43.3.1/32 -p tcp --dport 9481 ! -s 10.43.3.30/32 "
        "-m comment --comment gpucluster:t:guard:exporter -j REJECT --reject-with tcp-reset"
    )
    nfs = [line.replace(" -m comment --comment gpucluster:t:guard:nfs -j REJECT", "") for line in lines[1:]]
    # INPUT spares lo: the host's own mount of its own export is no container's traffic.
    assert nfs == [
        f"filter {chain} -s {subnet} -d 192.168.10.1/32 -p {proto} --dport 2049"
        for chain in ("FORWARD", "INPUT ! -i lo")
        for subnet in ("10.43.3.0/24", "10.45.0.0/24")
        for proto in ("tcp", "udp")
    ]
    # A site server without `input`: FORWARD only; an unknown kind is refused by name.
    assert "INPUT" not in bash('guard_rules "$1"', SITE_NFS).stdout
    bad = bash('guard_rules "$1"', "tag,ssh,1.2.3.4")
    assert bad.returncode == 1 and "unknown guard kind 'ssh'" in bad.stderr


# The host's namespace: a bridge with a node container (10.43.3.5) and Prometheus's container
# (10.43.3.30), the exporter's stand-in on the bridge address, a site NFS server's stand-in
# beyond the host (192.168.10.11, ports 2049 and 80) and one on the host (192.168.10.1:2049).
# The namespaces' prelude (netns, ip_forward on) is tests/network/netns_scene.py's.
SCENE = r"""
ct=$(netns) prom=$(netns) srv=$(netns)
trap 'kill $ct $prom $srv $(jobs -p) 2>/dev/null' EXIT
inside() { # inside PID ADDRESS/LEN GATEWAY: the namespace's eth0 with the address, routed via GATEWAY
  nsenter -t "$1" -n sh -c "ip link set lo up; ip addr add $2 dev eth0; ip link set eth0 up
    ip route add default via $3"
}
ip link add br0 type bridge && ip addr add 10.43.3.1/24 dev br0 && ip link set br0 up
for pair in "$ct 10.43.3.5" "$prom 10.43.3.30"; do
  read -r pid address <<< "$pair"
  ip link add "h$pid" type veth peer name eth0 netns "$pid"
  ip link set "h$pid" master br0 up
  inside "$pid" "$address/24" 10.43.3.1
done
ip link add hsrv type veth peer name eth0 netns "$srv"
ip addr add 192.168.10.1/24 dev hsrv && ip link set hsrv up
inside "$srv" 192.168.10.11/24 192.168.10.1
# The bridge's accept, as bridge_create appends it: the guards must come before it.
iptables -w -A FORWARD -i br0 -s 10.43.3.0/24 -j ACCEPT
serve() { python3 -c 'import socket,sys
s=socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()
while True: s.accept()[0].close()' "$@" </dev/null >/dev/null 2>&1 & }
serve 10.43.3.1 9481; serve 192.168.10.1 2049; serve 10.43.3.1 2049
nsenter -t "$srv" -n python3 -c 'import socket,sys,threading
def serve(port):
    s=socket.socket(); s.bind(("192.168.10.11", port)); s.listen()
    while True: s.accept()[0].close()
threading.Thread(target=serve, args=(80,), daemon=True).start(); serve(2049)' </dev/null >/dev/null 2>&1 &
wait_until 10 "the stand-in servers" tcp_connects 192.168.10.11 2049
wait_until 10 "the stand-in servers" tcp_connects 10.43.3.1 9481
probe() { # probe WHO PID ADDRESS PORT: open, refused or silent
  local result=open
  if [ "$2" = host ]; then tcp_connects "$3" "$4" || result=refused
  else nsenter -t "$2" -n timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$3" "$4" 2>/dev/null ||
    result=$([ $? = 124 ] && echo silent || echo refused)
  fi
  echo "$1 -> $3:$4 $result"
}
probes() {
  probe node "$ct" 10.43.3.1 9481; probe prometheus "$prom" 10.43.3.1 9481; probe host host 10.43.3.1 9481
  probe node "$ct" 192.168.10.11 2049; probe node "$ct" 192.168.10.11 80; probe host host 192.168.10.11 2049
  probe node "$ct" 192.168.10.1 2049; probe host host 192.168.10.1 2049
}
count() { echo "$1 rules: $(tagged_rule_count "gpucluster:t:guard:$1")"; }
echo "@ before"; probes
guard_up "$EXPORTER"; guard_up "$SITE_NFS"; guard_up "$SITE_NFS"
echo "@ guarded"; probes; count exporter; count nfs
guard_up "$SERVED_NFS"
echo "@ served"; probes; count nfs
( guard_up "gpucluster:t:guard:nfs,nfs,nowhere.invalid,2049,10.43.3.0/24" ) 2>&1 | sed 's/^/unresolved: /' || true
echo "after the unresolvable guard: $(count nfs)"
guard_down "$EXPORTER"; guard_down "$SERVED_NFS"; guard_down "$SERVED_NFS"
echo "@ down"; probes; count exporter; count nfs
guard_up "$BRIDGE_NFS"
echo "@ bridge"; probe node "$ct" 10.43.3.1 2049; probe host host 10.43.3.1 2049; count nfsbr
guard_down "$BRIDGE_NFS"
"""


def section(out: str, name: str) -> list[str]:
    return out.split(f"@ {name}\n")[1].split("@ ")[0].splitlines()


@pytest.mark.privileged  # network namespaces of its own (unshare -n), iptables in them
def test_a_node_container_is_refused_where_prometheus_and_the_host_get_through():
    guards = f"EXPORTER={EXPORTER} SITE_NFS={SITE_NFS} SERVED_NFS={SERVED_NFS} BRIDGE_NFS={BRIDGE_NFS}"
    done = run_scene(f"{guards}\n{SCENE}")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    every_probe = [
        "node -> 10.43.3.1:9481",
        "prometheus -> 10.43.3.1:9481",
        "host -> 10.43.3.1:9481",
        "node -> 192.168.10.11:2049",
        "node -> 192.168.10.11:80",
        "host -> 192.168.10.11:2049",
        "node -> 192.168.10.1:2049",
        "host -> 192.168.10.1:2049",
    ]
    assert section(out, "before") == [f"{p} open" for p in every_probe]
    refused = {"node -> 10.43.3.1:9481", "node -> 192.168.10.11:2049"}
    guarded = section(out, "guarded")
    assert guarded[:8] == [f"{p} {'refused' if p in refused else 'open'}" for p in every_probe]
    assert guarded[8:] == ["exporter rules: 1", "nfs rules: 4"]  # set twice, made once
    served = section(out, "served")
    refused = {"node -> 10.43.3.1:9481", "node -> 192.168.10.1:2049"}  # the guard moved to the host's own server
    assert served[:8] == [f"{p} {'refused' if p in refused else 'open'}" for p in every_probe]
    assert served[8] == "nfs rules: 8"
    assert "unresolved: error: cannot resolve nowhere.invalid" in out
    assert "after the unresolvable guard: nfs rules: 8" in out  # it left the rules as they were
    assert section(out, "down") == [*(f"{p} open" for p in every_probe), "exporter rules: 0", "nfs rules: 0"]
    # The export at the NAT bridge's address: the node refused, the host's own mount (from
    # 10.43.3.1, inside the guarded subnet, over lo) let through.
    assert section(out, "bridge") == ["node -> 10.43.3.1:2049 refused", "host -> 10.43.3.1:2049 open", "nfsbr rules: 4"]
