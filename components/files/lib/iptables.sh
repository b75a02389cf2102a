# iptables rules tagged with a comment, set and removed as a whole by their tag.
# delete_tagged_rules TAG: remove every rule carrying `--comment TAG` (our tags hold no spaces).
delete_tagged_rules() {
  local tag=$1 table rule
  command -v iptables >/dev/null || return 0
  for table in nat filter; do
    { iptables -w 30 -t "$table" -S | grep -E -- "--comment \"?${tag}\"?( |$)" || true; } | while read -r rule; do
      # iptables -S quotes the comment (it holds ':'); our tags have no spaces, so drop quotes.
      read -ra words <<< "${rule//\"/}"
      words[0]=-D
      iptables -w 30 -t "$table" "${words[@]}"
    done
  done
}

# Rule sets are written one rule per line, "TABLE CHAIN MATCH... -j TARGET" (no word holds a
# space), so the create scripts, the boot script and verify share one definition of each.

# rule_present RULE_LINE: whether iptables holds exactly this rule.
rule_present() {
  local words
  read -ra words <<< "$1"
  iptables -w 30 -t "${words[0]}" -C "${words[@]:1}" 2>/dev/null
}

# tagged_rule_count TAG: how many rules carry the tag, in the nat and filter tables.
tagged_rule_count() {
  (iptables -w 30 -t nat -S; iptables -w 30 -t filter -S) | grep -cE -- "--comment \"?$1\"?( |$)" || true
}

# rules_in_place TAG RULES: every rule line of RULES is there, and no other rule carries TAG.
rules_in_place() {
  local line in_place=0 count
  count=$(grep -c . <<< "$2")
  while read -r line; do
    rule_present "$line" && in_place=$((in_place + 1))
  done <<< "$2"
  [ "$in_place" = "$count" ] && [ "$(tagged_rule_count "$1")" = "$count" ]
}

# rules_up TAG WHERE: exactly the rule lines on stdin carry TAG afterwards. When they are
# all there already nothing changes; otherwise the tagged ones are replaced, appended at the
# end of their chains (WHERE=append) or inserted at the top in the order given (WHERE=top).
rules_up() {
  local tag=$1 where=$2 rules count i
  rules=$(cat)
  count=$(grep -c . <<< "$rules")
  rules_in_place "$tag" "$rules" && return 0
  delete_tagged_rules "$tag"
  if [ "$where" = top ]; then
    # Each at position 1, last first: the set ends up on top in the order given.
    for ((i = count; i >= 1; i--)); do
      read -ra words <<< "$(sed -n "${i}p" <<< "$rules")"
      iptables -w 30 -t "${words[0]}" -I "${words[1]}" 1 "${words[@]:2}"
    done
  else
    while read -r line; do
      read -ra words <<< "$line"
      iptables -w 30 -t "${words[0]}" -A "${words[@]:1}"
    done <<< "$rules"
  fi
}
