"""The GPU host: preflight, packages, shared directory."""
