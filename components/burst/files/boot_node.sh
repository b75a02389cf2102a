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
case $NODE_NAME in
  @*) echo "no node name in this launch: not a node of the cluster"; exit 1 ;;
esac
hostnamectl set-hostname "$NODE_NAME" 2>/dev/null || hostname "$NODE_NAME"

# The instance metadata service hands out the node role's credentials, which read the munge
# key: root only (this boot's fetch). Jobs run on the instance itself, so the hop limit does
# not stop them; this rule does, before slurmd (and any job) starts, and again at every start
# of slurmd (a reboot loses the rule): no node runs a job without it.
IMDS_RULE="OUTPUT -d 169.254.169.254/32 -m owner ! --uid-owner 0 -j REJECT"
command -v iptables >/dev/null || { echo "iptables is missing from the image: no job may reach IMDS"; exit 1; }
# shellcheck disable=SC2086 # the rule's words
iptables -w -C $IMDS_RULE 2>/dev/null || iptables -w -I $IMDS_RULE
install -d /etc/systemd/system/slurmd.service.d
printf '[Service]\nExecStartPre=/bin/sh -c "iptables -w -C %s 2>/dev/null || iptables -w -I %s"\n' \
  "$IMDS_RULE" "$IMDS_RULE" >/etc/systemd/system/slurmd.service.d/gpucluster-imds.conf
systemctl daemon-reload
# munge refuses credentials from a clock too far off.
systemctl enable --now chrony 2>/dev/null || true

# The key, from the one secret the role reads; written 0400 munge before munged starts.
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
# slurm.conf's AuthInfo names the cluster's socket path: a link to Debian's, as in the nodes.
printf 'd %s 0755 root root -\nL+ %s - - - - /run/munge/munge.socket.2\n' "$(dirname "$MUNGE_SOCKET")" "$MUNGE_SOCKET" \
  >/etc/tmpfiles.d/gpucluster-munge.conf
systemd-tmpfiles --create /etc/tmpfiles.d/gpucluster-munge.conf
systemctl restart munge

# The cluster's people (users[]): the same names, uids and gids as on every other node, so a
# job runs as its user here too; made before slurmd starts. Homes as on the nodes.
IFS=, read -ra people <<< "$PEOPLE"
for person in "${people[@]}"; do
  IFS=: read -r name uid gid group <<< "$person"
  getent group "$group" >/dev/null || groupadd -g "$gid" "$group"
  getent passwd "$name" >/dev/null || useradd -m -u "$uid" -g "$gid" -s /bin/bash "$name"
done
# The shared directory, where the hosts have it: the shared filesystem mounted there (the
# kernel's NFSv4 client, as root: a reserved port), so a job submitted from it runs in it and
# writes its output there. Without a shared filesystem it is a directory of this instance only.
# Made 0755 with its parents, whatever the umask the key was written under: every user's job
# goes through them.
if [ -n "$SHARED_DIR" ]; then
  (umask 022 && mkdir -p "$SHARED_DIR")
  if [ -n "$SHARED_MOUNT" ]; then
    IFS=: read -r nfs_server nfs_port nfs_export <<< "$SHARED_MOUNT"
    for attempt in $(seq 30); do
      mountpoint -q "$SHARED_DIR" && break
      mount -t nfs4 -o "port=$nfs_port,hard" "$nfs_server:$nfs_export" "$SHARED_DIR" && break
      echo "mount of $nfs_server:$nfs_export failed (attempt $attempt); again in 10 s"
      sleep 10
    done
    mountpoint -q "$SHARED_DIR" || { echo "the shared filesystem is not mounted: no node"; exit 1; }
  fi
fi

# Configless: the controller's address is all slurmd needs; -N is the name Slurm resumed.
printf 'SLURMD_OPTIONS="--conf-server %s:6817 -N %s"\n' "$CONTROLLER" "$NODE_NAME" >/etc/default/slurmd
systemctl enable slurmd
systemctl restart slurmd
echo "$(date -u +%FT%TZ) slurmd started"
