"""Forward and bridge rules as the scripts render them (components/files/lib/), and the shadow analysis.

The functions run in bash with the shared helpers loaded; for the analysis, `iptables` and `ip` are
shell functions that print a fixed ruleset, so nothing on the host is read or changed.
"""

import subprocess

from components.common.transport import helpers

TAG = "gpucluster:e2e:fwd:7000"
FORWARD = [TAG, "7000", "10.43.3.10", "8080"]
BRIDGE_TAG = "gpucluster:e2e:bridge:e2ebr0"


def bash(call: str, *args: str, fakes: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", "-c", f'{helpers()}\n{fakes}\n{call} "$@"', "test", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_forward_rules_in_order_dnat_then_an_accept_of_exactly_the_port():
    rules = bash("forward_rules", *FORWARD).stdout.splitlines()
    match = f"-p tcp --dport 7000 -m addrtype --dst-type LOCAL -m comment --comment {TAG}"
    assert rules == [
        f"nat PREROUTING {match} -j DNAT --to-destination 10.43.3.10:8080",
        f"nat OUTPUT {match} -j DNAT --to-destination 10.43.3.10:8080",
        "filter FORWARD -d 10.43.3.10 -p tcp --dport 8080 -m conntrack --ctstate DNAT "
        f"-m comment --comment {TAG} -j ACCEPT",
    ]


def test_allowed_sources_limit_outside_traffic_but_not_the_host():
    rules = bash("forward_rules", *FORWARD, "192.168.1.0/24+10.1.0.0/16").stdout.splitlines()
    prerouting = [r for r in rules if r.startswith("nat PREROUTING")]
    forward = [r for r in rules if r.startswith("filter FORWARD")]
    assert [r.split()[2:4] for r in prerouting] == [["-s", "192.168.1.0/24"], ["-s", "10.1.0.0/16"]]
    assert [r.split()[2:4] for r in forward] == [["-s", "192.168.1.0/24"], ["-s", "10.1.0.0/16"]]
    (output,) = [r for r in rules if r.startswith("nat OUTPUT")]
    assert " -s " not in output


def test_the_bridge_accepts_no_dnat_of_its_own():
    rules = bash("nat_rules", "e2e", "e2ebr0", "10.43.3.0/24").stdout.splitlines()
    assert rules == [
        f"nat POSTROUTING -s 10.43.3.0/24 ! -d 10.43.3.0/24 -m comment --comment {BRIDGE_TAG} -j MASQUERADE",
        f"filter FORWARD -i e2ebr0 -s 10.43.3.0/24 -m comment --comment {BRIDGE_TAG} -j ACCEPT",
        "filter FORWARD -o e2ebr0 -d 10.43.3.0/24 -m conntrack --ctstate RELATED,ESTABLISHED "
        f"-m comment --comment {BRIDGE_TAG} -j ACCEPT",
    ]
    assert not any("DNAT" in rule for rule in rules)


def test_each_bridge_ends_with_a_refusal_of_new_connections_after_what_it_admits():
    """What may open a connection into a bridge, then the refusal (proven in network namespaces:
    tests/network/test_bridge_refusal.py); the forwards and routes accept above it."""
    inbound = "gpucluster:e2e:inbound:e2ebr0"
    admitted = "10.90.1.0/24+10.90.2.0/24,10.43.3.2,6817 10.90.1.0/24,10.43.3.2+10.43.3.3,6818+60001:63000"
    rules = bash("inbound_rules", "e2e", "e2ebr0", admitted).stdout.splitlines()
    tcp = f"-o e2ebr0 -p tcp -m multiport --dports {{}} -m comment --comment {inbound} -j ACCEPT"
    assert rules == [
        f"filter FORWARD -i e2ebr0 -o e2ebr0 -m comment --comment {inbound} -j ACCEPT",
        "filter FORWARD -s 10.90.1.0/24 -d 10.43.3.2/32 " + tcp.format("6817"),
        "filter FORWARD -s 10.90.2.0/24 -d 10.43.3.2/32 " + tcp.format("6817"),
        "filter FORWARD -s 10.90.1.0/24 -d 10.43.3.2/32 " + tcp.format("6818,60001:63000"),
        "filter FORWARD -s 10.90.1.0/24 -d 10.43.3.3/32 " + tcp.format("6818,60001:63000"),
        f"filter FORWARD -o e2ebr0 -m conntrack --ctstate NEW -m comment --comment {inbound} -j REJECT",
    ]
    # The cluster bridge (and a NAT bridge without burst): its own traffic, then the refusal.
    assert len(bash("inbound_rules", "e2e", "e2ebr1").stdout.splitlines()) == 2


def test_the_burst_vpcs_route_is_not_masqueraded_and_accepts_nothing_of_its_own():
    route = ["e2e", "e2ebr0", "10.43.3.0/24", "10.90.0.0/16", "192.168.1.254"]
    tag = "gpucluster:e2e:route:10.90.0.0/16"
    assert bash("route_rules", *route, "burst").stdout.splitlines() == [
        f"nat POSTROUTING -s 10.43.3.0/24 -d 10.90.0.0/16 -m comment --comment {tag} -j RETURN"
    ]
    # Another host's subnet and the host itself are accepted into the bridge (above its refusal).
    assert [r.split()[2:5] for r in bash("route_rules", *route).stdout.splitlines()[1:]] == [
        ["-s", "10.90.0.0/16", "-o"],
        ["-s", "192.168.1.254/32", "-o"],
    ]


def test_rules_go_on_top_of_their_chains_in_order():
    # iptables records its calls: the set is inserted at position 1, last rule first.
    fakes = 'iptables() { case "$*" in *" -C "*|*" -S"*) return 1 ;; esac; echo "iptables $*"; }'
    calls = bash("forward_up", *FORWARD, fakes=fakes).stdout.splitlines()
    inserts = [c for c in calls if " -I " in c]
    # Each call waits for the xtables lock (-w) rather than failing while another holds it.
    assert [c.split()[1:7] for c in inserts] == [
        ["-w", "30", "-t", "filter", "-I", "FORWARD"],
        ["-w", "30", "-t", "nat", "-I", "OUTPUT"],
        ["-w", "30", "-t", "nat", "-I", "PREROUTING"],
    ]
    assert all(c.split()[7] == "1" for c in inserts)


def ruleset(prerouting: list[str] = (), forward: list[str] = ()) -> str:
    """Fake iptables -S / ip route for forward_shadows: our rules plus the given ones above."""
    dnat = f'-p tcp -m tcp --dport 7000 -m addrtype --dst-type LOCAL -m comment --comment "{TAG}" -j DNAT'
    ours = {
        "PREROUTING": f"-A PREROUTING {dnat} --to-destination 10.43.3.10:8080",
        "OUTPUT": f"-A OUTPUT {dnat} --to-destination 10.43.3.10:8080",
        "FORWARD": "-A FORWARD -d 10.43.3.10/32 -p tcp -m tcp --dport 8080 -m conntrack --ctstate DNAT "
        f'-m comment --comment "{TAG}" -j ACCEPT',
    }
    chains = {
        "PREROUTING": [*prerouting, ours["PREROUTING"]],
        "OUTPUT": [ours["OUTPUT"]],
        "FORWARD": [*forward, ours["FORWARD"]],
    }
    cases = "\n".join(
        f"    {chain}) printf '%s\\n' {' '.join(repr(r) for r in [f'-P {chain} ACCEPT', *rules])} ;;"
        for chain, rules in chains.items()
    )
    return (
        f'iptables() {{\n  case "$6" in\n{cases}\n  esac\n}}\n'
        "ip() { echo '10.43.3.10 dev e2ebr0 src 10.43.3.1 uid 0'; }"
    )


def shadows(**rules) -> list[str]:
    done = bash("forward_shadows", *FORWARD, "", fakes=ruleset(**rules))
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_nothing_above_ours_is_no_shadow():
    assert shadows() == []


def test_a_drop_above_ours_in_forward_is_named():
    (line,) = shadows(forward=["-A FORWARD -d 10.43.3.10/32 -p tcp -m tcp --dport 8080 -j DROP"])
    assert line.startswith("filter FORWARD: rule 1 (-A FORWARD -d 10.43.3.10/32 -p tcp -m tcp --dport 8080 -j DROP)")


def test_an_earlier_dnat_in_prerouting_is_named():
    (line,) = shadows(prerouting=["-A PREROUTING -p tcp -m tcp --dport 7000 -j DNAT --to-destination 10.9.9.9:80"])
    assert line.startswith("nat PREROUTING: rule 1 ")


def test_rules_that_cannot_take_the_forwards_traffic_do_not_shadow_it():
    harmless = [
        "-A FORWARD -p udp -j DROP",  # another protocol
        "-A FORWARD -p tcp -m tcp --dport 22 -j DROP",  # another port
        "-A FORWARD -d 10.9.0.0/16 -j DROP",  # another destination
        "-A FORWARD -o docker0 -j DROP",  # another outgoing interface
        "-A FORWARD -m conntrack --ctstate INVALID -j DROP",  # another state
        "-A FORWARD -j DOCKER-USER",  # a jump: not followed
        "-A FORWARD -i e2ebr0 -j ACCEPT",  # an accept in filter lets it through
        "-A FORWARD -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN --dport 22 -j DROP",  # two-word option
    ]
    assert (
        shadows(
            forward=harmless, prerouting=["-A PREROUTING -p tcp -m tcp --dport 8000 -j DNAT --to-destination 1.2.3.4"]
        )
        == []
    )
    assert len(shadows(forward=["-A FORWARD ! -d 10.9.0.0/16 -j REJECT --reject-with icmp-port-unreachable"])) == 1
