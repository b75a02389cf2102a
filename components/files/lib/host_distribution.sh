# The host distributions the program supports, read from os-release(5) (ID, VERSION_ID): the
# preflight refuses any other, and the packages script installs each package by its name there.

# Supported hosts as "ID VERSION_ID", and as the messages name them.
HOST_DISTRIBUTIONS=("debian 12" "debian 13" "ubuntu 22.04" "ubuntu 24.04")
HOST_DISTRIBUTIONS_NAMED="Debian 12, Debian 13, Ubuntu 22.04 or Ubuntu 24.04"

# The program names packages as Debian 12 does; where a supported host names one otherwise:
# "ID VERSION_ID DEBIAN_12_NAME NAME_THERE". libnfs 5 (Debian 13, Ubuntu 24.04) is soname 14.
HOST_PACKAGE_RENAMES=(
  "debian 13 libnfs13 libnfs14"
  "ubuntu 24.04 libnfs13 libnfs14"
)

# os_release_value FILE KEY: KEY's value in an os-release file, its quotes taken off (empty
# when absent). Read, not sourced: nothing in the file runs.
os_release_value() {
  local line value
  line=$(grep -m1 "^$2=" "$1" 2>/dev/null) || return 0
  value=${line#*=}
  value=${value#[\"\']}
  printf '%s\n' "${value%[\"\']}"
}

# host_distribution OS_RELEASE: the host's "ID VERSION_ID", e.g. "ubuntu 24.04".
host_distribution() {
  printf '%s %s\n' "$(os_release_value "$1" ID)" "$(os_release_value "$1" VERSION_ID)"
}

# host_distribution_problem OS_RELEASE: one line when the host runs a distribution the program
# does not support, naming what it found and what it supports; nothing on a supported one.
host_distribution_problem() {
  local file=$1 found supported id version name
  if [ ! -r "$file" ]; then
    echo "this host has no $file, so its distribution is unknown: the cluster's hosts run $HOST_DISTRIBUTIONS_NAMED"
    return 0
  fi
  found=$(host_distribution "$file")
  for supported in "${HOST_DISTRIBUTIONS[@]}"; do
    [ "$found" != "$supported" ] || return 0
  done
  read -r id version <<< "$found"
  name=$(os_release_value "$file" PRETTY_NAME)
  echo "this host runs ${name:-${id:-an unnamed distribution}} ($file: ID=${id:-(none)}, VERSION_ID=${version:-(none)}), which the program does not support: the cluster's hosts run $HOST_DISTRIBUTIONS_NAMED (the host scripts install those distributions' packages, by their names there)"
}

# host_package_names OS_RELEASE PACKAGE...: the packages by their names on the host's
# distribution, one a line (unchanged where it names them as Debian 12 does).
host_package_names() {
  local distribution package rename id version from to
  distribution=$(host_distribution "$1")
  shift
  for package in "$@"; do
    for rename in "${HOST_PACKAGE_RENAMES[@]}"; do
      read -r id version from to <<< "$rename"
      [ "$id $version" != "$distribution" ] || [ "$from" != "$package" ] || package=$to
    done
    printf '%s\n' "$package"
  done
}
