"""``%load_ext workbench`` adds ``%workbench PATH [--backend B] [--seed N]``, which opens
and displays the app like ``wb.open(PATH)`` (and returns it: ``app = %workbench p``).

Example (in a notebook)::

    %load_ext workbench
    %workbench sample_graphs/layernorm.json --backend cpu
"""
from __future__ import annotations

import argparse
import shlex

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from ..errors import WorkbenchError
from .opening import open as open_app


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # a UsageError, not SystemExit, inside IPython
        raise UsageError(f"%workbench: {message}; usage: {self.format_usage().strip()}")


_PARSER = _Parser(prog="%workbench", add_help=False)
_PARSER.add_argument("path")
_PARSER.add_argument("--backend", default="auto")
_PARSER.add_argument("--seed", type=int, default=0)


@magics_class
class WorkbenchMagics(Magics):
    @line_magic
    def workbench(self, line: str):
        """%workbench PATH [--backend auto|cpu|cupy|reference] [--seed N]"""
        try:
            args = _PARSER.parse_args(shlex.split(line))
        except ValueError as e:   # unbalanced quotes
            raise UsageError(f"%workbench: {e}") from None
        try:
            return open_app(args.path, backend=args.backend, seed=args.seed)
        except WorkbenchError as e:   # one line, no traceback
            raise UsageError(str(e)) from None


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(WorkbenchMagics)
