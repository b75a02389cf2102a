"""The script store: a host's scripts kept on the host once, as files named by their content.

A command's `create` and `delete` do not carry their script's text (35 KB for a node's create
with its helpers): they carry a stub of a few lines naming, one line each, the files the
script is made of (the helpers, the script, and the parameters too long for a short state) by
the SHA-256 of their text. The stub checks those files and runs their concatenation, which is
exactly the text `transport.script()` makes. The state then holds a few KB per command instead
of the text twice (input and echoed output), and the engine, which writes the whole state at
every step, no longer grows with the square of the cluster.

What reviewers rely on stays: a change of a helper changes the stub's line naming that helper,
so a preview says which commands re-run and for which file; the offline render (review/) sees
every command with its whole text (`logical_inputs`). A delete always finds its script: the
store only ever adds files (content never changes under a name), and it is removed after every
command of the host, at destroy.

Shipping: the program writes the files into `SHIP_DIR` (a cache beside the program, one file
per content, and one folder per host's set) while it runs; `<prefix>-scripts` copies them onto
the host into `<state_dir>/<cluster>/scripts` (a local command, after the host's checks, whose
preflight runs from the program's copy; or over SSH the provider's CopyToRemote, with
`<prefix>-scripts-dir` removing the folder at destroy). Parameters longer than
STORED_ENV_BYTES travel the same way, as a file `export NAME='value'` placed first.
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


def _write_once(path: Path, text: str) -> None:
    """Write a content-named file atomically (another run may write the same file at once)."""
    if path.exists():
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


def env_part(name: str, value: str) -> Part:
    return Part(f"env {name}", f"export {name}={shlex.quote(value)}\n")


def stub(store: str, parts: list[Part]) -> str:
    """The command text that runs `parts` from the store at `store`: POSIX shell up to the exec
    (an SSH login shell may be any), so it runs wherever the whole text ran before."""
    lines = [
        f"# Runs {parts[-1].label} from the script files in $s, each named by the SHA-256 of its text:",
        f"s={shlex.quote(store)}",
        "set --",
        *(f'set -- "$@" {part.name}  # {part.label}' for part in parts),
        'for f; do printf \'%s  %s\\n\' "$f" "$s/$f"; done | sha256sum --quiet --strict -c - >&2 || {',
        '  echo "script store $s: a file above is missing or changed; \\`pulumi up --replace\\`'
        " the host's -scripts resource ships them again\" >&2",
        "  exit 1",
        "}",
        'exec /bin/bash -c "$(cd "$s" && cat -- "$@")"',
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


@dataclass
class ScriptStore:
    """One host's store: where it is on the host, and the files its commands name. The set is
    complete once the program's synchronous part ran (`sealed`: the event loop's first turn);
    the shipping resource's input waits for it."""

    path: str
    """The store's folder on the host."""
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
        if not folder.exists():
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
        text = stub(folder or self.path, parts)
        if stored:  # as the environment named them (`prefix`: an SSH host's parameters)
            _STORED_ENV[text] = {f"{prefix}{key}": value for key, value in stored.items()}
        return text, kept
