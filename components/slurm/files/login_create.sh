# The login node: munge with the cluster's key, slurm.conf as a file (a client without slurmd
# has no configless mode), key-only sshd, each person's keys in a root-owned file
# (AUTHORIZED_KEYS_DIR/NAME), and a directory of their own in shared_dir (0700) made once
# (recorded on the host, in SHARED_DIRS_MADE, so the record outlives a replaced container: the
# delete removes them when empty). No Slurm daemon runs here.
# Nothing here acts on a path a person can write (their home, their directory in shared_dir
# once made): such a path may be a link to anything, and root would follow it.
require CLUSTER CONTAINER MUNGE_KEY_FILE MUNGE_SOCKET SLURM_CONF_TEXT SHARED_DIR SSHD_CONFIG PEOPLE SHARED_DIRS_MADE AUTHORIZED_KEYS_DIR
report_clone "$CONTAINER"
ct_setup_munge "$CONTAINER" || true
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
printf '%s' "$SLURM_CONF_TEXT" | ct_stage "$stage" /etc/slurm/slurm.conf 0644 root:root
# Pyxis in srun and sbatch (jobs in container images); without containers, ours goes.
if [ -n "${PLUGSTACK_CONF_TEXT:-}" ]; then
  # A login node of an image built without them gets Pyxis (and Enroot's files) in place.
  ct_install_containers "$CONTAINER" "${IMAGE:?}"
  printf '%s' "$PLUGSTACK_CONF_TEXT" | ct_stage "$stage" /etc/slurm/plugstack.conf 0644 root:root
elif in_ct "$CONTAINER" grep -qs '^# gpu-cluster: ' /etc/slurm/plugstack.conf; then
  ct_stage_absent "$stage" /etc/slurm/plugstack.conf
fi
printf '%s\n' "$SSHD_CONFIG" | ct_stage "$stage" /etc/ssh/sshd_config.d/gpucluster.conf 0644 root:root
# PEOPLE: one line per person, NAME:UID:GID:GROUP followed by their keys, one per following
# line starting with a space ("" keys: no authorized_keys, so no login).
people=()
name=""
keys=""
flush() {
  [ -n "$name" ] || return 0
  if [ -n "$keys" ]; then
    printf '%s' "$keys" | ct_stage "$stage" "$AUTHORIZED_KEYS_DIR/$name" 0644 root:root
  else
    ct_stage_absent "$stage" "$AUTHORIZED_KEYS_DIR/$name"
  fi
}
while IFS= read -r line; do
  if [ "${line:0:1}" = " " ]; then
    keys+="${line:1}"$'\n'
    continue
  fi
  flush
  IFS=: read -r name uid gid _ <<< "$line"
  people+=("$name:$uid:$gid")
  keys=""
done < <(lines "$PEOPLE")
flush
changed=$(ct_install_staged "$CONTAINER" "$stage") || die "could not install the login node's files in $CONTAINER"
# Each person's directory in shared_dir, made when missing (0700, theirs: another person cannot
# read their jobs' output), by the host's root: the login node's root is no host root. mkdir
# makes a new directory or fails (it follows no link, and only root writes in shared_dir), and
# only a directory made here is given to the person (chown -h: never through a link).
made=""
for person in "${people[@]}"; do
  IFS=: read -r name uid gid <<< "$person"
  own=$SHARED_DIR/$name
  if [ ! -e "$own" ] && [ ! -L "$own" ]; then
    if mkdir -m 0700 -- "$own" 2>/dev/null && chown -h -- "$uid:$gid" "$own"; then
      made+="$name"$'\n' # made here: recorded by the host
    else
      echo "warning: could not make $own (a root-squashed export?): make it on its server" >&2
    fi
  fi
done
if [ -n "$made" ]; then
  mkdir -p "$(dirname "$SHARED_DIRS_MADE")"
  printf '%s' "$made" >> "$SHARED_DIRS_MADE"
fi
# A clone shares the image's SSH host keys: the login node makes its own, once. The key files
# of people no longer listed go, and sshd is enabled.
in_ct "$CONTAINER" /bin/bash -c '
  set -euo pipefail
  keys=$1; changed=$2; shift 2
  if [ ! -f /etc/gpucluster/login-host-keys ]; then
    rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub
    ssh-keygen -A >/dev/null
    mkdir -p /etc/gpucluster && touch /etc/gpucluster/login-host-keys
    changed=1
  fi
  listed=" ${*%%:*} "
  for file in "$keys"/*; do
    [ -f "$file" ] || continue
    [[ $listed == *" ${file##*/} "* ]] || rm -f -- "$file"
  done
  # The image masks what logins need (its nodes have none): systemd-user-sessions removes
  # /run/nologin after boot, without which pam_nologin refuses every person.
  if [ -L /etc/systemd/system/systemd-user-sessions.service ]; then
    systemctl unmask --quiet systemd-user-sessions.service
  fi
  systemctl start systemd-user-sessions.service
  [ ! -e /run/nologin ] || systemctl restart systemd-user-sessions.service
  mkdir -p /run/sshd # its privilege separation directory, made by its unit: not yet before the first start
  sshd -t
  systemctl enable --quiet ssh
  if [ -n "$changed" ] || ! systemctl is-active --quiet ssh; then systemctl restart ssh; fi
' bash "$AUTHORIZED_KEYS_DIR" "$(grep -x /etc/ssh/sshd_config.d/gpucluster.conf <<< "$changed" || true)" "${people[@]}" ||
  die "sshd or the people's keys in $CONTAINER could not be set up"
