# Install the Debian packages the host lacks, and record which ones this cluster installed.
require PACKAGES RECORD
missing=()
while read -r package; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done < <(lines "$PACKAGES")
[ "${#missing[@]}" -gt 0 ] || exit 0
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >&2
mkdir -p "$(dirname "$RECORD")"
printf '%s\n' "${missing[@]}" >> "$RECORD"
