"""Commands that record how many of them run at once: the same script for the harness
(tests/harness/command_executor.py) and for the real engine, so both are measured alike.

Each run takes a flock on a shared file to count itself in (running, started, the peak of
running), waits until `barrier` of them have started (at most 20 s: the first wave all overlap,
however slow the machine), holds `hold` seconds more (a step the engine was not meant to start
yet has that long to show up), and counts itself out. POSIX sh: the provider's interpreter.
"""

from pathlib import Path

SCRIPT = """set -e
d='{folder}'
exec 9>>"$d/lock"
count() {{ v=$(cat "$d/$1" 2>/dev/null || echo 0); echo $((v + $2)) > "$d/$1"; }}
flock 9; count running 1; count started 1
[ "$(cat "$d/running")" -le "$(cat "$d/peak" 2>/dev/null || echo 0)" ] || cp "$d/running" "$d/peak"
flock -u 9
i=0
while [ "$(cat "$d/started")" -lt {barrier} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
sleep {hold}
flock 9; count running -1; flock -u 9
"""


def script(folder: Path, barrier: int, hold: float = 1.0) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    return SCRIPT.format(folder=folder, barrier=barrier, hold=hold)


def peak(folder: Path) -> int:
    """The most runs at once; every run must have ended (running back to 0)."""
    assert (folder / "running").read_text().strip() == "0", "a run did not count itself out"
    return int((folder / "peak").read_text())


def started(folder: Path) -> int:
    return int((folder / "started").read_text())
