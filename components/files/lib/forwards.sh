# Port forwards from the host into a container: their rules and the end-to-end check.
# forward_rules TAG HOST_PORT ADDRESS PORT [SOURCES]: DNAT for traffic from outside
# (PREROUTING) and from the host itself (OUTPUT), and a FORWARD accept of exactly the
# forwarded port to the target. SOURCES ('+'-separated CIDRs, empty: any) limit who outside
# the host is forwarded; the host itself always is.
forward_rules() {
  local tag=$1 host_port=$2 address=$3 port=$4 sources=${5:-} source
  local match="-p tcp --dport $host_port -m addrtype --dst-type LOCAL -m comment --comment $tag"
  for source in ${sources//+/ }; do
    printf '%s\n' "nat PREROUTING -s $source $match -j DNAT --to-destination $address:$port"
  done
  [ -n "$sources" ] || printf '%s\n' "nat PREROUTING $match -j DNAT --to-destination $address:$port"
  printf '%s\n' "nat OUTPUT $match -j DNAT --to-destination $address:$port"
  local accept="-d $address -p tcp --dport $port -m conntrack --ctstate DNAT -m comment --comment $tag -j ACCEPT"
  for source in ${sources//+/ }; do
    printf '%s\n' "filter FORWARD -s $source $accept"
  done
  [ -n "$sources" ] || printf '%s\n' "filter FORWARD $accept"
}

# forward_up TAG HOST_PORT ADDRESS PORT [SOURCES]: exactly the forward's rules, on top of
# their chains; a changed target or source list replaces them (found by their tag). Rules in
# place below one that takes their traffic go on top again: an earlier release appended its
# accept after the bridges' rules, and a bridge's refusal (placed before the first cluster's
# NAT rules, which another cluster on the host may have put first) then comes before it.
forward_up() {
  forward_rules "$@" | rules_up "$1" top
  [ -n "$(forward_shadows "$@")" ] || return 0
  delete_tagged_rules "$1"
  forward_rules "$@" | rules_up "$1" top
}

# forward_shadows TAG HOST_PORT ADDRESS PORT [SOURCES]: one line per rule that comes before
# the forward's own in nat PREROUTING, nat OUTPUT or filter FORWARD and would take its
# traffic first (a DROP, REJECT, RETURN, ACCEPT before the DNAT, another DNAT...). A rule
# whose matches exclude the forward's traffic (protocol, port, destination, source,
# connection state, address type) does not shadow it; jumps to other chains are not followed.
forward_shadows() {
  local out_dev
  out_dev=$(ip -o route get "$3" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p')
  { for chain in "nat PREROUTING" "nat OUTPUT" "filter FORWARD"; do
      read -r table name <<< "$chain"
      echo "@@ $table $name"
      iptables -w 30 -t "$table" -S "$name"
    done; } | python3 -c '
import ipaddress, shlex, sys
tag, host_port, address, port, sources, out_dev = sys.argv[1:7]
host_port, port, address = int(host_port), int(port), ipaddress.ip_address(address)
sources = [ipaddress.ip_network(s) for s in sources.split("+") if s]
TERMINAL = {"nat": {"ACCEPT", "DNAT", "REDIRECT", "RETURN", "NETMAP", "DROP"},
            "filter": {"DROP", "REJECT", "RETURN"}}

def ports_hit(spec, wanted):
    for part in spec.split(","):
        low, _, high = part.partition(":")
        if int(low or 0) <= wanted <= int(high or low or 65535):
            return True
    return False

def may_match(words, forward):
    dport = port if forward else host_port
    for i, opt in enumerate(words):
        if not opt.startswith("-"):
            continue
        negate = i > 0 and words[i - 1] == "!"
        value = words[i + 1] if i + 1 < len(words) and words[i + 1][0] not in "-!" else ""
        hit = None
        if opt == "-p":
            hit = value in ("tcp", "6", "all")
        elif opt in ("--dport", "--dports", "--destination-port"):
            hit = ports_hit(value, dport)
        elif opt == "-d" and forward:
            hit = address in ipaddress.ip_network(value, strict=False)
        elif opt == "-s" and sources:
            hit = any(ipaddress.ip_network(value, strict=False).overlaps(s) for s in sources)
        elif opt == "-o" and forward and out_dev:
            hit = value == out_dev or (value.endswith("+") and out_dev.startswith(value[:-1]))
        elif opt in ("--ctstate", "--state"):
            hit = bool({"NEW", "DNAT"} & set(value.split(",")))
        elif opt == "--dst-type":
            hit = "LOCAL" in value.split(",")
        if hit is not None and hit == negate:
            return False
    return True

table = chain = None
rules = {}
for line in sys.stdin:
    if line.startswith("@@ "):
        _, table, chain = line.split()
        rules[(table, chain)] = []
    elif line.startswith("-A "):
        rules[(table, chain)].append(line.strip())
for (table, chain), lines in rules.items():
    forward = chain == "FORWARD"
    ours = [n for n, line in enumerate(lines) if tag in line and (not forward or f"--dport {port}" in line)]
    if not ours:
        continue
    for n, line in enumerate(lines[: ours[0]]):
        words = shlex.split(line)[2:]
        target = words[words.index("-j") + 1] if "-j" in words else ""
        matches = words[: words.index("-j")] if "-j" in words else words
        if target in TERMINAL[table] and may_match(matches, forward):
            print(f"{table} {chain}: rule {n + 1} ({line}) comes before the forward of host port {host_port} and takes its traffic")
' "$1" "$2" "$3" "$4" "${5:-}" "${out_dev:-}"
}

# forward_check TAG HOST_PORT ADDRESS PORT [SOURCES]: the forward works end to end. No rule
# shadows it (the chain is named), and a connection from the host through the host port
# reaches the target whenever the target answers directly.
forward_check() {
  local shadows via
  shadows=$(forward_shadows "$@")
  [ -z "$shadows" ] || die "the forward of host port $2 to $3:$4 is shadowed: $shadows"
  via=$(ip -o route get "$3" 2>/dev/null | sed -n 's/.* src \([^ ]*\).*/\1/p')
  [ -n "$via" ] || die "no route from the host to $3 (the forward's target)"
  if ! tcp_connects "$3" "$4"; then
    log "warning: nothing answers at $3:$4 yet; the forward of host port $2 is checked by its rules only"
  elif ! tcp_connects "$via" "$2"; then
    die "the forward of host port $2 to $3:$4 does not answer through the host ($via:$2) although the target does"
  fi
}

# tcp_connects ADDRESS PORT: a TCP connection opens within 5 seconds.
tcp_connects() { timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' sh "$1" "$2" 2>/dev/null; }
