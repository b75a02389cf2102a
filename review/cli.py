"""How the review tools end on a user's mistake: one message naming it, never a traceback."""

import subprocess
import sys
from collections.abc import Callable


def run(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a tool's main; a missing file, a bad git ref or an invalid config is reported in
    words (status 1 for a config `pulumi up` would refuse, 2 for the rest)."""
    from components.stack_config import ConfigError

    try:
        return main(argv)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    except FileNotFoundError as error:
        print(f"error: {error.filename or error}: no such file", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as error:
        command = " ".join(map(str, error.cmd))
        detail = error.stderr.decode() if isinstance(error.stderr, bytes) else error.stderr or ""
        print(f"error: `{command}` failed: {detail.strip()}", file=sys.stderr)
        return 2
