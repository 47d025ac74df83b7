"""User-facing errors.

Anything the user can fix (a bad file, a model that does not fit, a bad
option) raises `UserError`; the CLI prints its message as one line and exits
with status 2.  Every other exception is a bug in tinyllm-gen and keeps its
traceback."""


class UserError(Exception):
    """A problem in the user's input, with the fix in the message."""

    exit_code = 2
