"""Errors meant for users: each carries one line saying what, where, and what to do."""


class GailkitError(Exception):
    """Base class of every error the CLI prints as one line (exit code 2)."""


class ConfigError(GailkitError):
    """A setting is unknown, of the wrong type, or impossible."""


class EnvError(GailkitError):
    """An `--env` name does not resolve, or the env does not fit what was asked of it."""


class DemoError(GailkitError):
    """A demonstration file is missing, unreadable, or does not fit the env."""


class ExpertError(GailkitError):
    """An expert cannot be loaded or does not fit the env."""


class InputError(GailkitError):
    """An input path is not a plain file, leaves the folder it must stay in, or is larger than allowed."""


def first_line(e: BaseException, limit: int = 300) -> str:
    """An exception's message as one line for a user's error: its first non-blank line (at most `limit`
    characters), or its type's name when it has none (a bare `assert`, `raise ValueError()`)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0][:limit] if lines else type(e).__name__
