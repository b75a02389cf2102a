"""The script store: a host's scripts kept on the host once, as files named by their content.

A command's `create` and `delete` do not carry their script's text (35 KB for a node's create
with its helpers): they carry a stub of a few lines naming, one line each, the files the
script is made of (the helpers, the script, and the parameters too long for a short state) by
the SHA-256 of their text. The stub checks those files and runs their concatenation, which is
exactly the text `transport.script()` makes, of any size: bash reads it (`RUN`), it is no
argument (Linux caps one at 128 KiB), and the command's stdin, $0 and positional parameters
are those of `bash -c TEXT`. The state then holds a few KB per command instead of the text
twice (input and echoed output), and the engine, which writes the whole state at every step,
no longer grows with the square of the cluster.

What reviewers rely on stays: a change of a helper changes the stub's line naming that helper,
so a preview says which commands re-run and for which file; the offline render (review/) sees
every command with its whole text (`logical_inputs`). A delete always finds its script: the
store only ever adds files (content never changes under a name), and it is removed after every
command of the host, at destroy.

Shipping: the program writes the files into `SHIP_DIR` (a cache beside the program, one file
per content, and one folder per host's set) while it runs, writing again one found with other
content; `<prefix>-scripts` copies them onto the host into `<state_dir>/<cluster>/scripts` (a
local command, after the host's checks, whose preflight runs from the program's copy; or over
SSH the provider's CopyToRemote, with `<prefix>-scripts-dir` removing the folder at destroy).
Parameters longer than STORED_ENV_BYTES travel the same way, as a file `export NAME='value'`
placed first (not exported when over Linux's cap: `env_part`).

Repair: a stub whose files are missing or changed stops before any of it runs and names one
command, `repair_command`: a replace of the host's `<prefix>-scripts`. Locally its create
checks every file of the set against its name and copies each missing or changed one again
(by rename), so any run of it repairs, and it is replaced delete-first (a replace that made
the new one first would remove the same folder at the end of the update); over SSH the copy
writes every file again and its replace deletes nothing. Either ships the program's current set
only: a file that only an older stub names (a delete not yet run) is not among them.
"""

import asyncio
import hashlib
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pulumi

ROOT = Path(__file__).resolve().parents[2]
SHIP_DIR = ROOT / ".gpucluster-scripts"
# Parameters above this size go to the store (the LXC config, slurm.conf, the web app's sources).
STORED_ENV_BYTES = 512


def ship_dir() -> str:
    """SHIP_DIR as the commands name it: relative to the program's folder, where the engine
    runs the program and its local commands (the same on every checkout: no diff)."""
    return SHIP_DIR.name


def files_dir() -> str:
    """The program's own copy of every file, as the commands name it (`ship_dir`)."""
    return f"{ship_dir()}/files"


def set_folder(name: str) -> str:
    """The folder of a set of files, named as `ship_dir`: the files under `scripts/`."""
    return f"{ship_dir()}/sets/{name}/scripts"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The files this run found or wrote with their content, by name.
_WRITTEN: set[str] = set()


def _write_once(path: Path, text: str) -> None:
    """Write a content-named file atomically (another run may write the same file at once); one
    found with other content is written again (the shipping copies only files that match)."""
    if path.name in _WRITTEN and path.exists():
        return
    _WRITTEN.add(path.name)
    if path.exists() and path.read_bytes() == text.encode():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temp, path)


@dataclass(frozen=True)
class Part:
    """One file of a script: its label in the stub (`lib/core.sh`, `env LXC_CONFIG`) and its text."""

    label: str
    text: str

    @property
    def name(self) -> str:
        return digest(self.text)


# Stub -> the whole text it runs, and stored parameter name -> value, for `logical_inputs`.
_LOGICAL: dict[str, str] = {}
_STORED_ENV: dict[str, dict[str, str]] = {}


# Linux's cap on one argument or environment string (MAX_ARG_STRLEN).
MAX_ARG_STRLEN = 131072


def env_part(name: str, value: str) -> Part:
    """A stored parameter's file: the variable, exported as the command's environment was. One
    over Linux's cap stays the script's own variable: exported, it would make every program the
    script starts fail (E2BIG), while the script's shell reads it whatever its size."""
    exported = len(f"{name}={value}".encode()) < MAX_ARG_STRLEN
    return Part(f"env {name}", f"{'export ' if exported else ''}{name}={shlex.quote(value)}\n")


def repair_command(stack: str, resource: str) -> str:
    """The one command that ships a host's files again: a replace of its store's resource
    (URN glob). Locally that resource is deleted first and its create copies the whole set; over
    SSH it is the SFTP copy, whose replace deletes nothing."""
    return f"./pulumi.sh up --stack {stack} --replace '**::{resource}'"


REPAIR = repair_command("STACK", "HOST-scripts")


def _sh_double_quoted(text: str) -> str:
    """`text` as the inside of a shell double-quoted string."""
    return "".join(f"\\{c}" if c in '\\"$`' else c for c in text)


# What the stub's bash runs: the files' concatenation, read by bash itself rather than passed as
# one argument (Linux caps one at 128 KiB: a login node's keys pass that). `cat` must succeed
# (a file gone since the check stops it before any of it runs); the trailing `.` keeps the
# text's final newlines. Then, as under `bash -c TEXT`: $0 is /bin/bash, no positional
# parameter, stdin the command's, and no variable of the stub's left.
RUN = (
    'text=$(cd "$1" && shift && cat -- "$@" && echo .) || {'
    ' echo "script store $1: its files could not be read" >&2; exit 1; }\n'
    "set --\n"
    'eval "unset -v text; ${text%.}"'
)


def stub(store: str, parts: list[Part], repair: str = REPAIR) -> str:
    """The command text that runs `parts` from the store at `store`: POSIX shell up to the exec
    (an SSH login shell may be any), so it runs wherever the whole text ran before. `repair`:
    the one command that ships the files again, named when one is missing or changed."""
    lines = [
        f"# Runs {parts[-1].label} from the script files in $s, each named by the SHA-256 of its text:",
        f"s={shlex.quote(store)}",
        "set --",
        *(f'set -- "$@" {part.name}  # {part.label}' for part in parts),
        'for f; do printf \'%s  %s\\n\' "$f" "$s/$f"; done | sha256sum --quiet --strict -c - >&2 || {',
        f'  echo "script store $s: a file above is missing or changed;'
        f' {_sh_double_quoted(repair)} ships them again" >&2',
        "  exit 1",
        "}",
        f'exec /bin/bash -c {shlex.quote(RUN)} /bin/bash "$s" "$@"',
    ]
    text = "\n".join(lines) + "\n"
    _LOGICAL[text] = "".join(part.text for part in parts if not part.label.startswith("env "))
    return text


def logical_inputs(inputs: dict) -> dict:
    """A command's inputs as they were before the store: each stub replaced by the text it runs,
    and the stored parameters back in the environment (the offline render and the tests read
    those; the engine sees the stubs)."""
    stubs = [inputs.get(key) for key in ("create", "delete") if isinstance(inputs.get(key), str)]
    if not any(text in _LOGICAL for text in stubs):
        return inputs
    restored = dict(inputs)
    for key in ("create", "delete"):
        if inputs.get(key) in _LOGICAL:
            restored[key] = _LOGICAL[inputs[key]]
    environment = dict(inputs.get("environment") or {})
    for name, value in _STORED_ENV.get(inputs.get("create") or inputs.get("delete"), {}).items():
        environment.setdefault(name, value)
    restored["environment"] = environment
    return restored


def _relink(folder: Path, names: list[str]) -> None:
    """An existing set's files: each the program's copy (a link to it), which `_write_once`
    may have written again since the set was made."""
    for name in names:
        source, target = SHIP_DIR / "files" / name, folder / name
        if not (target.exists() and os.path.samefile(source, target)):
            temp = folder / f".tmp-{name}-{os.getpid()}"
            temp.unlink(missing_ok=True)
            os.link(source, temp)
            os.replace(temp, target)


@dataclass
class ScriptStore:
    """One host's store: where it is on the host, and the files its commands name. The set is
    complete once the program's synchronous part ran (`sealed`: the event loop's first turn);
    the shipping resource's input waits for it."""

    path: str
    """The store's folder on the host."""
    repair: str = REPAIR
    """The command a stub names when a file is missing or changed (`repair_command`)."""
    names: set[str] = field(default_factory=set)
    _sealed: asyncio.Future | None = None

    def __post_init__(self):
        loop = asyncio.get_event_loop()
        self._sealed = loop.create_future()
        loop.call_soon(self._seal)

    @property
    def open(self) -> bool:
        return not self._sealed.done()

    def add(self, parts: list[Part]) -> None:
        for part in parts:
            _write_once(SHIP_DIR / "files" / part.name, part.text)
            self.names.add(part.name)

    def _seal(self) -> None:
        if self._sealed.done():
            return
        names = sorted(self.names)
        listing = "".join(f"{name}\n" for name in names)
        set_name = digest(listing)
        folder = SHIP_DIR / "sets" / set_name / "scripts"
        if folder.exists():
            _relink(folder, names)
        else:
            temp = Path(tempfile.mkdtemp(dir=SHIP_DIR, prefix=".tmp-set-")) / "scripts"
            temp.mkdir()
            for name in names:
                os.link(SHIP_DIR / "files" / name, temp / name)
            folder.parent.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(temp.parent, folder.parent)
            except OSError:  # another run made the same set
                shutil.rmtree(temp.parent)
        self._sealed.set_result(set_name)

    def shipped_set(self) -> pulumi.Output[str]:
        """The name of the set of files (a folder under SHIP_DIR/sets), once sealed."""
        return pulumi.Output.from_input(self._sealed)

    def command_text(
        self, parts: list[Part], environment: dict, prefix: str = "", folder: str | None = None
    ) -> tuple[str, dict]:
        """The stub running `parts` with the long plain parameters of `environment` from the
        store (or from `folder`, holding the same files), and the environment left to pass as
        such. Parameters become files only while the store is open; a command made later (in
        an apply) keeps them in its environment."""
        stored, kept = {}, {}
        for key, value in environment.items():
            long_text = isinstance(value, str) and len(value.encode()) > STORED_ENV_BYTES
            (stored if long_text and self.open else kept)[key] = value
        parts = [*(env_part(key, value) for key, value in sorted(stored.items())), *parts]
        self.add(parts)
        text = stub(folder or self.path, parts, self.repair)
        if stored:  # as the environment named them (`prefix`: an SSH host's parameters)
            _STORED_ENV[text] = {f"{prefix}{key}": value for key, value in stored.items()}
        return text, kept
