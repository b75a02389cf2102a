"""Test harness: the program under mocks, its commands run for real, and teardown."""
