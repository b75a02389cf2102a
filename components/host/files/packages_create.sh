# Install the packages the host lacks, and record which ones this cluster installed. PACKAGES
# are named as Debian 12 names them; each is installed by its name on the host's distribution
# (lib/host_distribution.sh), which the preflight checked.
require PACKAGES RECORD
mapfile -t wanted < <(lines "$PACKAGES")
missing=()
while read -r package; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done < <(host_package_names /etc/os-release "${wanted[@]}")
[ "${#missing[@]}" -gt 0 ] || exit 0
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Another apt (unattended-upgrades, an operator) may hold dpkg's lock: wait for it, not fail.
apt-get -o DPkg::Lock::Timeout=300 update -qq
apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${missing[@]}" >&2
mkdir -p "$(dirname "$RECORD")"
printf '%s\n' "${missing[@]}" >> "$RECORD"
