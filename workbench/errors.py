"""User-facing errors.

Every error a user can cause (a bad file, an unsupported op, an illegal fusion, a
missing compiler or GPU) is a :class:`WorkbenchError` whose message names the cause
and the fix in one line. The CLI prints it and exits with code 2; the session stays
as it was.
"""


class WorkbenchError(Exception):
    """An error caused by input or environment, with a message meant for a person."""

    def _render_traceback_(self) -> list[str]:
        # IPython/Jupyter show this instead of the traceback: the message already names
        # the cause and the fix, so ``wb.open("bad.json")`` reads one line, as the
        # %workbench magic does (an internal bug is no WorkbenchError: it keeps its
        # traceback)
        return [f"{type(self).__name__}: {self}"]


class GraphError(WorkbenchError):
    """The graph is malformed: unknown value, shape mismatch, cycle, bad attribute."""


class UnsupportedOpError(WorkbenchError):
    """The model uses op types the workbench does not implement."""

    def __init__(self, unsupported: dict[str, list[str]]):
        # unsupported: op type -> node names that use it
        self.unsupported = dict(sorted(unsupported.items()))
        parts = [f"{shown(op)} (nodes: {', '.join(map(shown, names[:5]))}"
                 f"{', ...' if len(names) > 5 else ''})"
                 for op, names in self.unsupported.items()]
        super().__init__(
            f"unsupported op types: {'; '.join(parts)} -- the workbench cannot import this "
            "model; replace these ops or add their definitions to workbench.ops")


class FusionRefused(WorkbenchError):
    """A transformation is illegal; the message gives the reason."""


class BackendUnavailable(WorkbenchError):
    """The requested backend cannot run here (no GPU, no C compiler)."""


class ArtifactError(WorkbenchError):
    """An exported artifact cannot be written or loaded: changed, truncated, foreign,
    made by a newer workbench, or its target path is taken."""


def shown(text: object) -> str:
    """Text from a user (a path, a name) as it may appear in a one-line message: every
    non-printable character (a newline, an escape) spelled as its escape sequence."""
    s = str(text)
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1]
                                             for c in s)


def existing_file(path, expect: str) -> str:
    """The label (``shown``) of ``path`` once it is known to be a regular file; else one
    WorkbenchError: a directory where ``expect`` (".onnx file") was due, or not found."""
    from pathlib import Path
    path = Path(path)
    label = shown(path)
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except (OSError, ValueError):    # a NUL byte, a name too long
        is_dir = is_file = False
    if is_dir:
        raise WorkbenchError(f"{label} is a directory, not a graph file; pass the {expect}")
    if not is_file:
        raise WorkbenchError(f"file not found: {label}; check the path")
    return label
