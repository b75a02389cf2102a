"""How the review tools end on a user's mistake: one message naming it, never a traceback."""

import subprocess
import sys
from collections.abc import Callable


def run(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a tool's main; a missing file, a bad git ref or an invalid config is reported in
    words (status 1 for a config `pulumi up` would refuse, 2 for the rest)."""
    try:
        return main(argv)
    except FileNotFoundError as error:
        print(f"error: {error.filename or error}: no such file", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as error:
        command = " ".join(map(str, error.cmd))
        detail = error.stderr.decode() if isinstance(error.stderr, bytes) else error.stderr or ""
        print(f"error: `{command}` failed: {detail.strip()}", file=sys.stderr)
        return 2
    except Exception as error:
        # The program's ConfigError, matched by name: importing it here would load components/
        # before `review.render --root` points the imports at another tree.
        if type(error).__name__ != "ConfigError":
            raise
        print(error, file=sys.stderr)
        return 1
