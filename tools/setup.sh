# Shared by up.sh, test.sh and verify.sh (sourced, from the project root): the Python venv
# they run in, and which stack this machine can bring up.

# ensure_venv [test]: venv/ with the locked packages installed: requirements.lock (what runs
# the program), and with `test` requirements-test.lock beside it (the test tools). Every file is
# checked against the lock's sha256 and nothing unlocked comes in (--require-hashes --no-deps):
# up.sh and verify.sh run as root, with the stack's passphrase. A venv/ without a working
# python or pip (left by a `python3 -m venv` that failed half-way, as it does on a Debian
# without python3-venv) is rebuilt; python3-venv is installed first when it is missing (as
# root; else the command is named).
ensure_venv() {
  local locks=(-r requirements.lock)
  [ "${1:-}" != test ] || locks+=(-r requirements-test.lock)
  if { [ -e venv ] || [ -L venv ]; } && ! venv/bin/python -c 'import pip' >/dev/null 2>&1; then
    echo "venv/ is broken (no working python or pip in it): rebuilding it" >&2
    rm -rf venv
  fi
  if [ ! -e venv ]; then
    if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
      if [ "$(id -u)" != 0 ]; then
        echo "error: python3 cannot make a venv here: Debian's python3-venv is missing. Run as root:" >&2
        echo "  apt-get install -y python3-venv" >&2
        return 1
      fi
      echo "installing Debian's python3-venv (python3 cannot make a venv without it)" >&2
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    fi
    python3 -m venv venv
  fi
  venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps "${locks[@]}"
}

# Whether this machine has the NVIDIA driver loaded: the test the stand-in GPUs make
# (components/host/files/stand_in_gpus_create.sh), which refuses them where it holds.
nvidia_driver_loaded() {
  [ -e "${NVIDIA_DRIVER_PROC:-/proc/driver/nvidia}" ]
}
