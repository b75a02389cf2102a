# The cluster's accounts, their members, GPU limits and QOS, as the config lists them, applied
# with sacctmgr (the host's wrapper: the node image's, lib/slurm_client.sh). Only changes are
# sent: applied twice, the second run changes nothing. Accounts and QOS this program made
# carry MANAGED_BY as their organization / description; only those are ever modified or
# removed, and an account is not removed while it has jobs. The record lives in the
# database, so it travels with a dump and its restore.
#   QOS:      "NAME PRIORITY MAX_GPUS_PER_USER MAX_WALL_MINUTES" (- for none)
#   ACCOUNTS: "NAME GPUS QOS,... DEFAULT_QOS" (- for none)
#   MEMBERS:  "USER ACCOUNT", a user's first line naming their default account
require CLUSTER CLUSTER_DIR MANAGED_BY QOS ACCOUNTS MEMBERS
use_cluster_slurm
sm() { log "sacctmgr $*"; sacctmgr -i "$@" >&2; }
show() { sacctmgr -nP show "$@"; }
has() { grep -qxF -- "$2" <<< "$1"; }
sorted_csv() { tr ',' '\n' <<< "$1" | sed '/^$/d' | sort -u | paste -sd, -; }
gpu_tres() { [ "$1" = - ] && echo "" || echo "gres/gpu=$1"; }
none() { [ "$1" = - ] && echo "" || echo "$1"; }
# wall MINUTES: MaxWall as sacctmgr shows it ([D-]HH:MM:SS).
wall() {
  [ "$1" != - ] || return 0
  local d=$(($1 / 1440)) h=$(($1 % 1440 / 60)) m=$(($1 % 60))
  if [ "$d" -gt 0 ]; then printf '%d-%02d:%02d:00\n' "$d" "$h" "$m"; else printf '%02d:%02d:00\n' "$h" "$m"; fi
}
unlimited() { [ "$1" = - ] && echo -1 || echo "$1"; }

wait_until 60 "slurmdbd to answer sacctmgr" sacctmgr -n show cluster
wanted_qos=$(lines "$QOS" | awk '{print $1}')
wanted_accounts=$(lines "$ACCOUNTS" | awk '{print $1}')

# QOS: ours by description; a QOS of that name made by someone else is refused.
current=$(show qos format=name,description,priority,maxtrespu,maxwall)
while read -r name priority gpus wall; do
  [ -n "$name" ] || continue
  line=$(grep -E "^$name\|" <<< "$current" || true)
  if [ -z "$line" ]; then
    sm add qos "$name" Description="$MANAGED_BY"
    line="$name|$MANAGED_BY|0||"
  fi
  IFS='|' read -r _ description have_priority have_tres have_wall <<< "$line"
  [ "$description" = "$MANAGED_BY" ] || die "QOS $name exists and was not made by this cluster's config (description '$description')"
  want_tres=$(gpu_tres "$gpus")
  [ "$have_priority" = "$priority" ] && [ "$have_tres" = "$want_tres" ] && [ "$have_wall" = "$(wall "$wall")" ] && continue
  sm modify qos where name="$name" set Priority="$priority" \
    MaxTRESPerUser="gres/gpu=$(unlimited "$gpus")" MaxWall="$(unlimited "$wall")"
done < <(lines "$QOS")

# Accounts: ours by organization; GrpTRES, QOS and DefaultQOS of the account's association.
organizations=$(show account format=account,organization)
associations() { show assoc cluster="$CLUSTER" format=account,user,grptres,qos,defaultqos; }
assoc=$(associations)
while read -r name gpus qos default_qos; do
  [ -n "$name" ] || continue
  organization=$(grep -E "^$name\|" <<< "$organizations" | cut -d'|' -f2 || true)
  if [ -z "$organization" ] && ! grep -qE "^$name\|" <<< "$organizations"; then
    sm add account "$name" Cluster="$CLUSTER" Organization="$MANAGED_BY" Description="$MANAGED_BY"
    assoc=$(associations)
  elif [ "$organization" != "$MANAGED_BY" ]; then
    die "account $name exists and was not made by this cluster's config (organization '$organization')"
  fi
  [ "$qos" != - ] || qos=normal
  want="$(gpu_tres "$gpus")|$(sorted_csv "$qos")|$(none "$default_qos")"
  IFS='|' read -r _ _ have_tres have_qos have_default <<< "$(grep -E "^$name\|\|" <<< "$assoc" || true)"
  [ "$have_tres|$(sorted_csv "$have_qos")|$have_default" = "$want" ] && continue
  sm modify account where name="$name" cluster="$CLUSTER" set \
    GrpTRES="gres/gpu=$(unlimited "$gpus")" QOS="$qos" DefaultQOS="$(unlimited "$default_qos")"
done < <(lines "$ACCOUNTS")

# Members: each (user, account) pair; a user's default account is their first.
ours=$(show account format=account,organization | awk -F'|' -v tag="$MANAGED_BY" '$2 == tag {print $1}')
pairs=$(associations | awk -F'|' '$2 != "" {print $2 " " $1}')
while read -r user account; do
  [ -n "$user" ] || continue
  has "$pairs" "$user $account" && continue
  sm add user "$user" Account="$account" Cluster="$CLUSTER"
done < <(lines "$MEMBERS")
defaults=$(show user format=user,defaultaccount)
while read -r user account; do
  [ -n "$user" ] || continue
  has "$defaults" "$user|$account" || sm modify user where name="$user" set DefaultAccount="$account"
done < <(lines "$MEMBERS" | awk '!seen[$1]++')

# Removals: pairs of our accounts no longer listed, then our accounts and QOS no longer
# listed. Checked first: nothing is removed while it has jobs (pending or running).
wanted_pairs=$(lines "$MEMBERS")
pairs() { associations | awk -F'|' '$2 != "" {print $2 " " $1}'; }
gone_pairs=$(pairs | while read -r user account; do
  has "$ours" "$account" && ! has "$wanted_pairs" "$user $account" && echo "$user $account"
done || true)
gone_accounts=$(while read -r account; do
  [ -z "$account" ] || has "$wanted_accounts" "$account" || echo "$account"
done <<< "$ours")
busy=()
while read -r account; do
  [ -n "$account" ] || continue
  jobs=$(squeue -h -A "$account" -o %i | paste -sd, -) || die "cannot list the jobs of account $account (squeue)"
  [ -z "$jobs" ] || busy+=("account $account (jobs $jobs)")
done <<< "$gone_accounts"
while read -r user account; do
  [ -n "$user" ] || continue
  jobs=$(squeue -h -A "$account" -u "$user" -o %i | paste -sd, -) || die "cannot list the jobs of $user in $account (squeue)"
  [ -z "$jobs" ] || busy+=("$user in account $account (jobs $jobs)")
done <<< "$gone_pairs"
[ "${#busy[@]}" = 0 ] || die "no longer in the config but with jobs, so not removed: ${busy[*]}; apply again once they end"
while read -r user account; do
  [ -n "$user" ] || continue
  current=$(pairs)
  has "$current" "$user $account" || continue # gone with the whole user already
  # A user in none of the listed accounts, and only in ours, goes entirely (sacctmgr keeps
  # a user's default association otherwise).
  if ! grep -q "^$user " <<< "$wanted_pairs" && [ -z "$(awk -v u="$user" '$1 == u {print $2}' <<< "$current" | grep -vxF -f <(printf '%s\n' "$ours"))" ]; then
    sm delete user where name="$user"
  else
    sm delete user where name="$user" account="$account" cluster="$CLUSTER"
  fi
done <<< "$gone_pairs"
while read -r account; do
  [ -z "$account" ] || sm delete account where name="$account"
done <<< "$gone_accounts"
while read -r name description; do
  [ "$description" = "$MANAGED_BY" ] && ! has "$wanted_qos" "$name" || continue
  sm delete qos where name="$name"
done < <(show qos format=name,description | tr '|' ' ')
log "accounts in place: $(paste -sd' ' <<< "$wanted_accounts")"
