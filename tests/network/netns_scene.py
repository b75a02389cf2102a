"""Network namespaces of a test's own, for the firewall tests of this folder: the host is a
namespace made by `unshare -n`, its containers and outside machines are namespaces of `sleep`
processes attached by veth pairs, and the scene script runs there with the project's shell
helpers, so the real rule functions act on real iptables and real connections."""

import os
import shutil
import subprocess

from components.common.transport import INTERPRETER, helpers

# What every scene starts with: `netns` makes a namespace (its holder's pid), `in_ns PID CMD`
# runs in it, `attach PID HOST_LINK BRIDGE|-HOST_ADDRESS ADDRESS/LEN GATEWAY` gives it an eth0
# on a bridge (or routed to an address of the host's), with a default route.
PRELUDE = r"""
ip link set lo up
sysctl -qw net.ipv4.ip_forward=1
netns() { unshare -n sleep 120 </dev/null >/dev/null 2>&1 & local pid=$!
  until [ "$(readlink /proc/$pid/ns/net)" != "$(readlink /proc/self/ns/net)" ]; do sleep 0.05; done
  echo $pid; }
in_ns() { nsenter -t "$1" -n "${@:2}"; }
attach() {
  ip link add "$2" type veth peer name eth0 netns "$1"
  case "$3" in -*) ip addr add "${3#-}" dev "$2" ;; *) ip link set "$2" master "$3" ;; esac
  ip link set "$2" up
  in_ns "$1" sh -c "ip link set lo up; ip addr add $4 dev eth0; ip link set eth0 up; ip route add default via $5"
}
"""


def run_scene(scene: str, timeout: int = 180) -> subprocess.CompletedProcess:
    """The scene (after PRELUDE and the helpers) in a network namespace of its own."""
    for tool in ("unshare", "nsenter", "iptables", "python3"):
        assert shutil.which(tool), f"{tool} is missing"
    return subprocess.run(
        ["unshare", "-n", *INTERPRETER, f"{helpers()}\n{PRELUDE}\n{scene}", "test"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"]},
        timeout=timeout,
    )
