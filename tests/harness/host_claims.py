"""What the end-to-end tests take on this host (ports, bridges, subnets), and whether anything
else already holds some of it: a cluster someone brought up with ./up.sh, or another program.
The tests then stop before changing anything, with the list (tests/conftest.py).

The values are the e2e stack's and its variants' (tests/harness/e2e_teardown.py,
tests/test_e2e_*.py); the shipped stacks a user brings up (local, nogpu) use others for their
bridges, but local forwards 7000 and nogpu 7001 and 10.46.0.0/16, as these tests do.
"""

import ipaddress
import json
import re
import subprocess
from dataclasses import dataclass, field

from tests.harness.e2e_teardown import TEST_CLUSTERS

# Host ports forwarded: the e2e web app's, its moved port (test_e2e_changes), a second cluster's (test_e2e_lifecycle).
PORTS = (7000, 7001, 7011)
# Every subnet a bridge, namespace link or route of the tests lies in.
# 10.49: the rename test's; 10.52: the two hosts through a jump host (its hosts and jump host),
# whose bridges are in 10.53-10.54; 10.53-10.55: the burst test's cluster, burst VPC and VPN link.
SUBNETS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "10.43.0.0/16",
        "10.44.0.0/16",
        "10.45.0.0/16",
        "10.46.0.0/16",
        "10.49.0.0/16",
        "10.52.0.0/16",
        "10.53.0.0/16",
        "10.54.0.0/16",
        "10.55.0.0/16",
    )
)
# Links of the tests' own (a cut-short run may leave them without an alias): the bridges of
# the test clusters and the links to their namespaces (e2e-out0, e2eh2a: tests/harness/ssh_hosts.py).
OWN_LINK = re.compile(r"^(e2e|(" + "|".join(TEST_CLUSTERS) + r")br)")


@dataclass
class Link:
    name: str
    alias: str = ""
    networks: list[str] = field(default_factory=list)


@dataclass
class HostFacts:
    listening: set[int]  # TCP ports something listens on
    nat_rules: list[str]  # `iptables -t nat -S` lines
    links: list[Link]


def _ours(alias: str) -> bool:
    return any(alias == f"gpucluster:{cluster}" for cluster in TEST_CLUSTERS)


def _rule_ours(rule: str) -> bool:
    return any(f"gpucluster:{cluster}:" in rule for cluster in TEST_CLUSTERS)


def conflicts(facts: HostFacts) -> list[str]:
    """One line per thing on the host the end-to-end tests would collide with."""
    found = []
    for port in PORTS:
        if port in facts.listening:
            found.append(f"host port {port} is in use by a listening process")
        for rule in facts.nat_rules:
            if re.search(rf"--dport {port}( |$)", rule) and not _rule_ours(rule):
                owner = re.search(r"gpucluster:([a-z0-9]+):", rule)
                found.append(
                    f"host port {port} is forwarded by "
                    + (f"the cluster {owner.group(1)}" if owner else "another iptables rule")
                    + f": {rule}"
                )
    for link in facts.links:
        if _ours(link.alias) or OWN_LINK.match(link.name):
            continue
        for network in link.networks:
            net = ipaddress.ip_interface(network).network
            for subnet in SUBNETS:
                if net.overlaps(subnet):
                    owner = f" (cluster {link.alias.removeprefix('gpucluster:')})" if link.alias else ""
                    found.append(f"interface {link.name}{owner} has {network}, inside {subnet}")
    return found


def host_facts() -> HostFacts:
    """This host's listening ports, NAT rules and IPv4 links, read only."""
    listening = set()
    for line in subprocess.run(["ss", "-Htln"], capture_output=True, text=True, check=False).stdout.splitlines():
        local = line.split()[3] if len(line.split()) > 3 else ""
        port = local.rpartition(":")[2]
        if port.isdigit():
            listening.add(int(port))
    rules = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True, check=False).stdout
    links = []
    ip = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=False).stdout
    for link in json.loads(ip or "[]"):
        try:
            with open(f"/sys/class/net/{link['ifname']}/ifalias") as alias_file:
                alias = alias_file.read().strip()
        except OSError:
            alias = ""
        networks = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])]
        links.append(Link(link["ifname"], alias, networks))
    return HostFacts(listening, rules.splitlines(), links)


def refusal(found: list[str]) -> str:
    return (
        "the end-to-end tests stop before changing anything: this host already uses what they need\n"
        + "".join(f"  - {line}\n" for line in found)
        + "A cluster you brought up (./up.sh STACK) is the usual cause: take it down first (./down.sh STACK),"
        " or run the end-to-end tests on a machine of their own. The other tests: ./test.sh -m 'not e2e'."
    )
