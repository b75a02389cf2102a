"""The program under mocks, as the tests use it: the recorder lives in review/program.py, shared
with the offline render (`python -m review.render`)."""

from review.program import PROJECT, ROOT, ProgramRun, Registration, run_program, stack_config

__all__ = ["PROJECT", "ROOT", "ProgramRun", "Registration", "run_program", "stack_config"]
