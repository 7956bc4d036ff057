"""Every script's exit on bad input: one line `error: ...` on stderr and exit code 2, no traceback; Ctrl-C one line
and exit code 130. `ArgParser` is argparse with that one line for a bad flag; `cli(main)` runs a script's main;
`set_threads` sets torch's CPU threads as train.py's --threads does (1 by default; config.add_threads adds the flag);
`need_module` names the install command of an optional package that is missing."""
from __future__ import annotations

import argparse
import os
import sys

from data import DataError


class ArgParser(argparse.ArgumentParser):
    """argparse with one `error:` line (cli prints it, exit code 2) instead of usage + message on a bad flag."""

    def error(self, message):
        raise SystemExit(f"error: {message} (python {self.prog} --help lists the options)")


THREADS = 1  # --threads' default (config.Config.threads is declared with it)


def set_threads(n: int | None = None) -> None:
    """torch's CPU threads for this process, as train.py sets them: n (None: --threads' default, 1; 0: torch's own
    default, left as it is); nothing on a machine with a GPU. An OpenMP pool that shares its cores with other work
    runs many times slower than one thread."""
    import torch

    if n is None:
        n = THREADS
    if n and not torch.cuda.is_available():
        torch.set_num_threads(n)


def need_module(name: str, install: str):
    """`import name`, or one `error:` line naming the command that installs it (an optional dependency)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        raise SystemExit(f"error: the {name} package is not installed ({install})") from None


def cli(main, argv=None) -> int:
    """Run a script's `main`: bad input ends in one line `error: ...` on stderr and exit code 2, no traceback.

    The scripts report bad input by raising DataError (data files) or SystemExit("error: ...") (flags, model and
    checkpoint directories), always before anything is written. Ctrl-C ends in one line `interrupted` and exit code
    130 (128 + SIGINT), as train.py's own (runs.interrupted). Returns the exit code: `sys.exit(cli(main))`.
    """
    import signal

    try:
        rc = main() if argv is None else main(argv)
        return rc if type(rc) is int else 0  # a main that returns its exit code (the tools) keeps it
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the one line, not a traceback from a second Ctrl-C
        print(f"interrupted ({os.path.basename(sys.argv[0]) or 'python'}): nothing more was written", file=sys.stderr)
        return 130
    except DataError as e:
        msg = f"error: {e}"
    except SystemExit as e:
        if not (isinstance(e.code, str) and e.code.startswith("error:")):
            raise
        msg = e.code
    print(msg, file=sys.stderr)
    return 2
