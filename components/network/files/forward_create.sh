# Host port -> container port: DNAT for traffic from outside (PREROUTING) and from the host
# itself (OUTPUT), and a FORWARD accept. All rules carry TAG; a changed target replaces them.
require TAG HOST_PORT TARGET_ADDRESS TARGET_PORT
destination="$TARGET_ADDRESS:$TARGET_PORT"
match=(-p tcp --dport "$HOST_PORT" -m addrtype --dst-type LOCAL -m comment --comment "$TAG")
rules=(
  "nat PREROUTING ${match[*]} -j DNAT --to-destination $destination"
  "nat OUTPUT ${match[*]} -j DNAT --to-destination $destination"
  "filter FORWARD -p tcp -d $TARGET_ADDRESS --dport $TARGET_PORT -m conntrack --ctstate DNAT -m comment --comment $TAG -j ACCEPT"
)
in_place=0
for rule in "${rules[@]}"; do
  read -ra words <<< "$rule"
  iptables -t "${words[0]}" -C "${words[@]:1}" 2>/dev/null && in_place=$((in_place + 1))
done
present=$( (iptables -t nat -S; iptables -t filter -S) | grep -cE -- "--comment \"?$TAG\"?( |$)" || true)
[ "$in_place" = "${#rules[@]}" ] && [ "$present" = "${#rules[@]}" ] && exit 0
delete_tagged_rules "$TAG"
for rule in "${rules[@]}"; do
  read -ra words <<< "$rule"
  iptables -t "${words[0]}" -A "${words[@]:1}"
done
