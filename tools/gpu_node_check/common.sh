# What check.sh and in_namespace.sh share (sourced from the repository's root).
COMMANDS=tools/gpu_node_check/work/commands.json

# scratch_paths: under check.sh's fresh scratch directory ($SCRATCH), the unpacked LXC, its
# container path and the containers' rootfs and logs.
scratch_paths() { LXC_ROOT=$SCRATCH/lxc-install LXCPATH=$SCRATCH/containers CT=$SCRATCH/ct; }

step() { printf '\n===== %s (%ss)\n' "$*" "$SECONDS"; }

# libs FILE...: the project's shell helpers (components/files/lib/FILE.sh), in this shell.
libs() {
  source components/files/lib/core.sh
  set +e +u
  for l in "$@"; do source "components/files/lib/$l.sh"; done
}

# env_of NAME VAR: a variable of the command NAME's environment (prepare.py's commands.json).
env_of() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]]["environment"][sys.argv[3]])' "$COMMANDS" "$@"; }

# runcmd NAME [VAR=VALUE...]: the command's create script with its environment, as the engine runs it.
runcmd() {
  python3 - "$COMMANDS" "$@" <<'PY'
import json, os, subprocess, sys
path, name, extra = sys.argv[1], sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
c = json.load(open(path))[name]
done = subprocess.run([*c["interpreter"], c["create"]], env={**os.environ, **c["environment"], **extra},
                      capture_output=True, text=True, timeout=120)
print(f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-5000:]}")
PY
}
