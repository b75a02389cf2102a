"""CPU seconds of the Pulumi engine's own processes during a run, by role: the CLI, the Python
language host, the program (the Python it runs), the pulumi-command provider. The scripts the
provider starts are not counted here (the benchmark's cgroup counts them with the host's work).

Sampled from /proc every `interval` seconds: each process's own user + system time (utime +
stime, never its children's), kept at its last sample, so a process loses at most one interval
of CPU at its exit (the engine's processes live for the whole run). Only processes whose
working directory is under `workdir` (the engine's temporary project) count: other Pulumi runs
on the machine are left out.
"""

import os
import threading
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def role(pid: str) -> str | None:
    """What an engine process is, by its executable and command line; None: not one of them."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if exe == "pulumi":
        return "cli"
    if exe == "pulumi-language-python":
        return "language host"
    if exe == "pulumi-resource-command":
        return "provider"
    if exe.startswith("python") and any(arg.endswith(b"pulumi-language-python-exec") for arg in argv[:3]):
        return "program"
    return None


def cpu_seconds(pid: str) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


class EngineCpu:
    """with EngineCpu(workdir) as cpu: ...; then cpu.by_role() -> {role: CPU seconds}."""

    def __init__(self, workdir: Path, interval: float = 0.1):
        self.workdir = str(workdir)
        self.interval = interval
        self.seen: dict[tuple[str, float], tuple[str, float]] = {}  # (pid, start time): (role, cpu)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "EngineCpu":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if not os.readlink(f"/proc/{pid}/cwd").startswith(self.workdir):
                    continue
                started = float(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
            except OSError:
                continue
            key = (pid, started)
            known = self.seen.get(key)
            what = known[0] if known else role(pid)
            spent = cpu_seconds(pid)
            if what and spent is not None:
                self.seen[key] = (what, spent)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def by_role(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for what, spent in self.seen.values():
            found[what] = round(found.get(what, 0.0) + spent, 2)
        return found
