# Remove the directories the create made, deepest first, and only when empty: no job's
# files are lost, and directories that were there before stay.
require SHARED_DIR RECORD
[ -f "$RECORD" ] || exit 0
tac "$RECORD" | while read -r dir; do
  [ -d "$dir" ] || continue
  rmdir "$dir" 2>/dev/null || { log "keeping $dir: it is not empty"; break; }
done
rm -f "$RECORD"
