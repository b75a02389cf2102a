# people: the same name, uid and gid on the host and in every container
# A person is NAME:UID:GID:GROUP. These functions run on the host, and in a container through
# users_in_ct, which declares them into a shell there (config values travel as arguments).

# users_check SPEC...: refuse, before anything changes, a name or id that is someone else's.
users_check() {
  local spec name uid gid group found problems=()
  for spec in "$@"; do
    IFS=: read -r name uid gid group <<< "$spec"
    found=$(getent passwd "$name" | cut -d: -f3,4) || true
    [ -z "$found" ] || [ "$found" = "$uid:$gid" ] || problems+=("user $name exists with uid:gid $found, users[] says $uid:$gid")
    found=$(getent passwd "$uid" | cut -d: -f1) || true
    [ -z "$found" ] || [ "$found" = "$name" ] || problems+=("uid $uid belongs to $found, users[] gives it to $name")
    found=$(getent group "$group" | cut -d: -f3) || true
    [ -z "$found" ] || [ "$found" = "$gid" ] || problems+=("group $group exists with gid $found, users[] says $gid")
    found=$(getent group "$gid" | cut -d: -f1) || true
    [ -z "$found" ] || [ "$found" = "$group" ] || problems+=("gid $gid belongs to group $found, users[] says $group")
  done
  [ "${#problems[@]}" = 0 ] && return 0
  printf 'error: %s\n' "${problems[@]}" >&2
  return 1
}

# user_add SPEC HOME: the group and the user, each made when missing (HOME: yes makes a home
# directory). Prints `group NAME` / `user NAME` for what it made.
user_add() {
  local name uid gid group home=$2
  IFS=: read -r name uid gid group <<< "$1"
  if ! getent group "$group" >/dev/null; then
    groupadd -g "$gid" "$group"
    echo "group $group"
  fi
  if ! getent passwd "$name" >/dev/null; then
    if [ "$home" = yes ]; then
      useradd -m -u "$uid" -g "$gid" -s /bin/bash "$name"
    else
      useradd -M -d /nonexistent -u "$uid" -g "$gid" -s /usr/sbin/nologin "$name"
    fi
    echo "user $name"
  fi
}

# users_converge RECORD HOME SPEC...: exactly these people among the ones RECORD says this
# function made: missing ones are added, recorded ones no longer wanted are removed. People
# who were there before are never removed.
users_converge() {
  local record=$1 home=$2 spec kind item keep name group
  shift 2
  users_check "$@"
  mkdir -p "$(dirname "$record")"
  touch "$record"
  for spec in "$@"; do
    user_add "$spec" "$home" >> "$record"
  done
  keep=$(for spec in "$@"; do
    IFS=: read -r name _ _ group <<< "$spec"
    printf 'user %s\ngroup %s\n' "$name" "$group"
  done)
  # Users before groups: a group goes once no user has it as primary group.
  for kind in user group; do
    while read -r item; do
      grep -qxF "$kind $item" <<< "$keep" && continue
      if [ "$kind" = user ]; then
        userdel -r "$item" 2>/dev/null || userdel "$item" 2>/dev/null || true
      else
        groupdel "$item" 2>/dev/null || true
      fi
      sed -i "/^$kind $item\$/d" "$record"
    done < <(sed -n "s/^$kind //p" "$record")
  done
}

# users_in_ct CONTAINER RECORD SPEC...: users_converge inside a container (homes made there).
users_in_ct() {
  local name=$1 record=$2
  shift 2
  in_ct "$name" /bin/bash -c "set -euo pipefail; $(declare -f log die users_check user_add users_converge)"'
    users_converge "$@"' bash "$record" yes "$@"
}

# people on the host, shared by every cluster on it
# Several clusters may name the same person: each cluster registers as a user of the person
# and of their group (HOST_PEOPLE_DIR/user-NAME/clusters/CLUSTER); a person this program
# created (…/created) goes when the last cluster naming them does. Never someone who was
# there before.
HOST_PEOPLE_DIR=/var/lib/gpucluster-host/people

# with_dir_lock DIR COMMAND...: run COMMAND holding DIR/lock (retried when DIR was removed
# while we waited, since the lock file goes with its directory).
with_dir_lock() {
  local dir=$1 fd
  shift
  while :; do
    mkdir -p "$dir"
    exec {fd}>> "$dir/lock"
    flock "$fd"
    if [ "$dir/lock" -ef "/proc/self/fd/$fd" ]; then
      "$@"
      exec {fd}>&-
      return 0
    fi
    exec {fd}>&-
  done
}

# _host_people CLUSTER SPEC...: the cluster uses exactly these people on the host.
_host_people() {
  local cluster=$1 spec kind item name group wanted=() entry
  shift
  for spec in "$@"; do
    while read -r kind item; do
      [ -z "$kind" ] || { mkdir -p "$HOST_PEOPLE_DIR/$kind-$item" && touch "$HOST_PEOPLE_DIR/$kind-$item/created"; }
    done < <(user_add "$spec" no)
    IFS=: read -r name _ _ group <<< "$spec"
    wanted+=("user-$name" "group-$group")
    for entry in "user-$name" "group-$group"; do
      mkdir -p "$HOST_PEOPLE_DIR/$entry/clusters"
      touch "$HOST_PEOPLE_DIR/$entry/clusters/$cluster"
    done
  done
  shopt -s nullglob
  for entry in "$HOST_PEOPLE_DIR"/user-* "$HOST_PEOPLE_DIR"/group-*; do
    [ -e "$entry/clusters/$cluster" ] || continue
    [[ " ${wanted[*]} " == *" $(basename "$entry") "* ]] && continue
    rm -f "$entry/clusters/$cluster"
    [ -z "$(ls -A "$entry/clusters")" ] || continue
    item=$(basename "$entry")
    if [ -e "$entry/created" ]; then
      case "$item" in
        user-*) userdel "${item#user-}" 2>/dev/null || true ;;
        group-*) groupdel "${item#group-}" 2>/dev/null || true ;;
      esac
      log "removed ${item/-/ } (made for the clusters using it; the last one left)"
    fi
    rm -rf "$entry"
  done
  shopt -u nullglob
  [ -n "$(ls -A "$HOST_PEOPLE_DIR" | grep -v '^lock$' || true)" ] || rm -rf "$HOST_PEOPLE_DIR"
  rmdir "$(dirname "$HOST_PEOPLE_DIR")" 2>/dev/null || true
}

# host_people CLUSTER SPEC...: the people on the host, under the lock of HOST_PEOPLE_DIR.
host_people() {
  [ "$#" -gt 1 ] || [ -d "$HOST_PEOPLE_DIR" ] || return 0
  with_dir_lock "$HOST_PEOPLE_DIR" _host_people "$@"
}
