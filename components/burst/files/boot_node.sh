#!/bin/bash
# The first boot of a burst node (EC2 user data, rendered by components/burst/user_data.py;
# the resume program puts the node's name in each launch's copy). It holds no secret: the
# munge key comes from Secrets Manager with the instance's role, which may read that one
# secret only, and only root may reach the metadata service that hands out the role. Then munged, and slurmd configless with the node's name: it fetches slurm.conf
# and gres.conf from slurmctld and registers from this instance's own address.
set -euo pipefail
NODE_NAME=@NODE_NAME@
CONTROLLER=@CONTROLLER@
REGION=@REGION@
SECRET_ID=@SECRET_ID@
ENDPOINT=@ENDPOINT@
MUNGE_SOCKET=@MUNGE_SOCKET@
PEOPLE=@PEOPLE@
SHARED_DIR=@SHARED_DIR@
SHARED_MOUNT=@SHARED_MOUNT@
exec >>/var/log/gpucluster-burst-boot.log 2>&1
echo "$(date -u +%FT%TZ) boot of burst node ${NODE_NAME}"

# A failed boot tells Slurm why: the node goes DOWN with the reason `burst boot: <step>`
# (instead of silence until ResumeTimeout). Root here holds the munge key once it is fetched,
# and the controller hands scontrol its config (configless). Before munged runs nothing can
# sign a request to slurmctld: the reason goes to the log and the console (EC2's
# get-console-output) only, and Slurm sees ResumeTimeout.
step="the boot's start"
munge_up=
boot_failed() {
  local status=$? reason
  [ "$status" = 0 ] && return 0
  reason="burst boot: $step (exit $status)"
  echo "$(date -u +%FT%TZ) $reason"
  { echo "gpucluster: $reason"; } 2>/dev/null >/dev/console || true
  if [ -n "$munge_up" ]; then
    SLURM_CONF_SERVER="$CONTROLLER:6817" timeout 60 \
      scontrol update nodename="$NODE_NAME" state=down reason="${reason:0:250}" ||
      echo "slurmctld was not told: the node ends at ResumeTimeout"
  else
    echo "munge is not running: slurmctld cannot be told; the node ends at ResumeTimeout"
  fi
}
trap boot_failed EXIT
case $NODE_NAME in
  @*) step="no node name in this launch: not a node of the cluster"; exit 1 ;;
esac
step="the host name"
hostnamectl set-hostname "$NODE_NAME" 2>/dev/null || hostname "$NODE_NAME"

# The instance metadata service hands out the node role's credentials, which read the munge
# key: root only (this boot's fetch). Jobs run on the instance itself, so the hop limit does
# not stop them; this rule does, before slurmd (and any job) starts, and again at every start
# of slurmd (a reboot loses the rule): no node runs a job without it.
IMDS_RULE="OUTPUT -d 169.254.169.254/32 -m owner ! --uid-owner 0 -j REJECT"
step="iptables is missing from the image"
command -v iptables >/dev/null || { echo "iptables is missing from the image: no job may reach IMDS"; exit 1; }
step="the IMDS rule"
# shellcheck disable=SC2086 # the rule's words
iptables -w -C $IMDS_RULE 2>/dev/null || iptables -w -I $IMDS_RULE
install -d /etc/systemd/system/slurmd.service.d
printf '[Service]\nExecStartPre=/bin/sh -c "iptables -w -C %s 2>/dev/null || iptables -w -I %s"\n' \
  "$IMDS_RULE" "$IMDS_RULE" >/etc/systemd/system/slurmd.service.d/gpucluster-imds.conf
systemctl daemon-reload
# munge refuses credentials from a clock too far off.
systemctl enable --now chrony 2>/dev/null || true

# The key, from the one secret the role reads; written 0400 munge before munged starts.
step="the munge key from Secrets Manager"
install -d -o munge -g munge -m 0700 /etc/munge
umask 077
REGION=$REGION SECRET_ID=$SECRET_ID ENDPOINT=$ENDPOINT KEY_OUT=/etc/munge/munge.key.new python3 - <<'PY'
import base64, os, boto3
client = boto3.client("secretsmanager", region_name=os.environ["REGION"], endpoint_url=os.environ["ENDPOINT"] or None)
secret = client.get_secret_value(SecretId=os.environ["SECRET_ID"])
key = secret.get("SecretBinary") or base64.b64decode(secret["SecretString"])
with open(os.environ["KEY_OUT"], "wb") as out:
    out.write(key)
PY
chown munge:munge /etc/munge/munge.key.new
chmod 0400 /etc/munge/munge.key.new
mv /etc/munge/munge.key.new /etc/munge/munge.key
step="munged"
# slurm.conf's AuthInfo names the cluster's socket path: a link to Debian's, as in the nodes.
printf 'd %s 0755 root root -\nL+ %s - - - - /run/munge/munge.socket.2\n' "$(dirname "$MUNGE_SOCKET")" "$MUNGE_SOCKET" \
  >/etc/tmpfiles.d/gpucluster-munge.conf
systemd-tmpfiles --create /etc/tmpfiles.d/gpucluster-munge.conf
systemctl restart munge
munge_up=yes

# The cluster's people (users[]): the same names, uids and gids as on every other node, so a
# job runs as its user here too; made before slurmd starts. Homes as on the nodes. A name or
# id the image already gives someone else (Debian's AMI: `admin`, uid and gid 1000) is
# refused before anything changes, as on the nodes: the reason names it.
#@LIB people.sh users_check user_add@
IFS=, read -ra people <<< "$PEOPLE"
step="users[]"
if ! problems=$(users_check "${people[@]}" 2>&1); then
  echo "$problems"
  step="users[] clash with the image's accounts: $(sed 's/^error: //' <<< "$problems" | paste -sd ';')"
  exit 1
fi
for person in "${people[@]}"; do
  step="making ${person%%:*} of users[]"
  user_add "$person" yes
done
# The shared directory, where the hosts have it: the shared filesystem mounted there (the
# kernel's NFSv4 client, as root: a reserved port), so a job submitted from it runs in it and
# writes its output there. Without a shared filesystem it is a directory of this instance only.
# Made 0755 with its parents, whatever the umask the key was written under: every user's job
# goes through them.
if [ -n "$SHARED_DIR" ]; then
  step="shared_dir"
  (umask 022 && mkdir -p "$SHARED_DIR")
  if [ -n "$SHARED_MOUNT" ]; then
    IFS=: read -r nfs_server nfs_port nfs_export <<< "$SHARED_MOUNT"
    # User data runs once: at every later boot (a reboot) systemd mounts it from fstab once
    # the network is up, and slurmd starts only with it mounted (no job runs without it).
    fstab_line="$nfs_server:$nfs_export $SHARED_DIR nfs4 port=$nfs_port,hard,_netdev 0 0"
    grep -qxF "$fstab_line" /etc/fstab 2>/dev/null || printf '%s\n' "$fstab_line" >>/etc/fstab
    printf '[Unit]\nRequiresMountsFor=%s\n' "$SHARED_DIR" >/etc/systemd/system/slurmd.service.d/gpucluster-shared-dir.conf
    step="the mount of $nfs_server:$nfs_export at shared_dir"
    for attempt in $(seq 30); do
      mountpoint -q "$SHARED_DIR" && break
      mount -t nfs4 -o "port=$nfs_port,hard" "$nfs_server:$nfs_export" "$SHARED_DIR" && break
      echo "mount of $nfs_server:$nfs_export failed (attempt $attempt); again in 10 s"
      sleep 10
    done
    mountpoint -q "$SHARED_DIR" || { echo "the shared filesystem is not mounted: no node"; exit 1; }
    # After the mount: systemd reads it as the fstab unit's, mounted, when slurmd requires it.
    systemctl daemon-reload
  fi
fi

# Configless: the controller's address is all slurmd needs; -N is the name Slurm resumed.
step="slurmd"
printf 'SLURMD_OPTIONS="--conf-server %s:6817 -N %s"\n' "$CONTROLLER" "$NODE_NAME" >/etc/default/slurmd
systemctl enable slurmd
systemctl restart slurmd
echo "$(date -u +%FT%TZ) slurmd started"
