#!/usr/bin/env bash
# Run any pulumi command for this project: the pinned CLI (tools/pulumi-cli.sh), the state in
# .pulumi-state/ next to the project, and a passphrase for the stack's secrets.
#   ./pulumi.sh stack output web_url --stack local
#   ./pulumi.sh preview --stack nogpu
# The passphrase: $PULUMI_CONFIG_PASSPHRASE or $PULUMI_CONFIG_PASSPHRASE_FILE when set; else
# ~/.config/gpucluster/passphrase-<hash of the state's path>, generated (0600) on first use:
# apart from the state it protects, so a copy of .pulumi-state/ carries no key. Its name (not
# the passphrase) is recorded in .pulumi-state/key-name, so the same state reached through a
# symlink or moved elsewhere finds the same passphrase.
set -euo pipefail
# The physical path: a symlink to the checkout names the same state.
root=$(cd "$(dirname "$0")" && pwd -P)
state=$root/.pulumi-state

# The pinned CLI first on PATH. The CLI built from its Go modules keeps its self-built provider
# in a PULUMI_HOME of its own, never the user's ~/.pulumi; a release CLI uses the user's as
# usual. `tools/pulumi-cli.sh env` says which (review.preview runs the CLI the same way).
cli_env=$("$root/tools/pulumi-cli.sh" env)
while IFS='=' read -r key value; do
  case $key in
    cli_dir) export PATH="$value:$PATH" ;;
    PULUMI_HOME) export PULUMI_HOME=$value ;;
  esac
done <<< "$cli_env"
export PULUMI_BACKEND_URL="file://$state"
export PULUMI_SKIP_UPDATE_CHECK=true
# The file backend needs its folder, whatever supplies the passphrase (0700: it holds the
# stacks' state, secrets encrypted).
if [ ! -d "$state" ]; then
  (umask 077 && mkdir -p "$state")
fi

if [ -n "${PULUMI_CONFIG_PASSPHRASE+set}" ]; then
  [ -n "$PULUMI_CONFIG_PASSPHRASE" ] || {
    echo "error: PULUMI_CONFIG_PASSPHRASE is set but empty: the stack's secrets would be unprotected;" \
      "set a passphrase, or unset it to use the generated one (docs/pulumi-cli.md)" >&2
    exit 1
  }
elif [ -n "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  [ -s "$PULUMI_CONFIG_PASSPHRASE_FILE" ] || {
    echo "error: PULUMI_CONFIG_PASSPHRASE_FILE=$PULUMI_CONFIG_PASSPHRASE_FILE is missing or empty" >&2
    exit 1
  }
else
  keys=${XDG_CONFIG_HOME:-$HOME/.config}/gpucluster
  # The name recorded in the state wins (a moved checkout); else the hash of this path.
  name_record=$state/key-name
  name=$(cat "$name_record" 2>/dev/null || true)
  if ! [[ $name =~ ^passphrase-[0-9a-f]{12}$ ]]; then
    name=passphrase-$(printf '%s' "$state" | sha256sum | cut -c1-12)
    # An earlier version keyed it on the logical path (pwd): a checkout reached by a symlink.
    logical=$(cd "$(dirname "$0")" && pwd)/.pulumi-state
    older=passphrase-$(printf '%s' "$logical" | sha256sum | cut -c1-12)
    [ -s "$keys/$name" ] || [ ! -s "$keys/$older" ] || name=$older
  fi
  generated=$keys/$name
  passphrase_file=$generated
  inside_state=$state/passphrase
  if [ -s "$inside_state" ] && [ ! -s "$passphrase_file" ]; then
    # Made by an earlier version of this script: still used, never moved behind your back.
    passphrase_file=$inside_state
    echo "note: the passphrase sits inside the state it protects ($inside_state): a copy of the" \
      "state carries its key. Move it: mkdir -p -m 0700 $keys && mv $inside_state $generated" >&2
  elif [ ! -s "$passphrase_file" ]; then
    mkdir -p "$keys"
    chmod 0700 "$keys"
    (umask 077 && head -c 32 /dev/urandom | base64 > "$passphrase_file.new" && mv "$passphrase_file.new" "$passphrase_file")
    echo "generated the passphrase protecting the stacks' secrets: $passphrase_file (mode 0600)." \
      "Keep a copy; without it the state's secrets cannot be decrypted." \
      "To use your own, set PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE before the first ./up.sh." >&2
  fi
  if [ "$passphrase_file" = "$generated" ] && [ "$(cat "$name_record" 2>/dev/null)" != "$name" ]; then
    (umask 077 && printf '%s\n' "$name" > "$name_record")
  fi
  export PULUMI_CONFIG_PASSPHRASE_FILE=$passphrase_file
fi

cd "$root"
# Steps at once for the commands that take --parallel: the cluster's (nodes + 16), not the CLI's
# 4 x the cores, unless --parallel or PULUMI_PARALLEL says otherwise (tools/parallelism.py says
# which, one line). Without the venv the CLI's default stays.
case ${1:-} in
  up | update | preview | destroy | refresh)
    python=venv/bin/python
    [ -x "$python" ] || python=python3
    if parallel=$("$python" tools/parallelism.py "$@"); then
      [ -z "$parallel" ] || export PULUMI_PARALLEL=$parallel
    fi
    ;;
esac
# A stack file's encryptionsalt records the passphrase it was made under; under another one the
# CLI says only "incorrect passphrase". After a failed command the wrapper has the CLI encrypt a
# value under this passphrase into a copy of the stack file, and when that fails the same way, names the stack file and
# what to do. (pulumi's output is not piped through anything: the daemons its scripts start
# would inherit the pipe and hold it open.)
status=0
pulumi "$@" || status=$?
if [ "$status" != 0 ]; then
  stack=
  args=("$@")
  for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
      --stack | -s) stack=${args[i + 1]:-} ;;
      --stack=*) stack=${args[i]#--stack=} ;;
    esac
  done
  [ -n "$stack" ] || stack=$(pulumi stack --show-name 2>/dev/null || true)
  file="stacks/Pulumi.${stack:-STACK}.yaml"
  # The probe: encrypting a value with this passphrase, into a copy of the stack file.
  probe=$(mktemp --suffix=.yaml)
  trap 'rm -f "$probe"' EXIT
  said=
  if [ -n "$stack" ] && grep -qs '^encryptionsalt:' "$file" && cp "$file" "$probe"; then
    said=$(pulumi config set --secret gpucluster-passphrase-probe x --stack "$stack" --config-file "$probe" 2>&1) || true
  fi
  if [[ $said == *"incorrect passphrase"* ]]; then
    cat >&2 <<MSG
error: the passphrase in use does not open $file: its encryptionsalt (and any secure: value in
it) was written under another passphrase, e.g. by another clone or machine. Either
  - use that passphrase: PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE (the
    generated one of a clone is the ~/.config/gpucluster/ file its .pulumi-state/key-name names), or
  - if $file holds no secret you need, delete its encryptionsalt line and every secure: value,
    then set the secrets again (./pulumi.sh config set --secret KEY --stack $stack);
    a stack with state in .pulumi-state/ also needs its old passphrase to decrypt that state.
See docs/pulumi-cli.md.
MSG
  fi
fi
exit "$status"
