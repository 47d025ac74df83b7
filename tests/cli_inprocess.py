"""The CLI run in this process (no interpreter start-up, the test's own
PYTHONPATH): (exit code, stdout, stderr), as a user's shell would see them."""
from __future__ import annotations

import contextlib
import io


def cli(argv: list[str]) -> tuple[int, str, str]:
    from tinyllm_gen.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()
