# The host directory every node sees at the same path; records which directories it made.
require SHARED_DIR RECORD
[ -d "$SHARED_DIR" ] && exit 0
mkdir -p "$(dirname "$RECORD")"
mkdir -pv "$SHARED_DIR" | sed -n "s/^mkdir: created directory '\(.*\)'$/\1/p" >> "$RECORD"
