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
    """The model uses op types the workbench does not implement.

    ``unsupported`` maps each op type (with the reason, for an unsupported use of an op)
    to the names of every node that uses it. ``locations`` (optional, same keys and
    order) says where each node sits in the model -- ``index in encoder.layer.0.attention``
    (torch: the module path) or ``node_GatherND_47 (after /encoder/Unsqueeze_1)`` (ONNX:
    the nearest named producer); ``hints`` maps an op type to the way around it, where
    one exists. The message lists the first ``SHOWN`` nodes of each type and how many
    more there are, in one line.
    """

    SHOWN = 5

    def __init__(self, unsupported: dict[str, list[str]],
                 locations: dict[str, list[str]] | None = None,
                 hints: dict[str, str] | None = None):
        # unsupported: op type -> node names that use it
        self.unsupported = dict(sorted(unsupported.items()))
        self.locations = {k: list((locations or {}).get(k) or v)
                          for k, v in self.unsupported.items()}
        self.hints = {k: h for k, h in (hints or {}).items() if h and k in self.unsupported}
        parts = []
        for op, where in self.locations.items():
            more = len(where) - self.SHOWN
            nodes = ", ".join(map(shown, where[:self.SHOWN])) + \
                (f" and {more} more" if more > 0 else "")
            count = f"{len(where)} nodes" if len(where) > 1 else "node"
            parts.append(f"{shown(op)} ({count}: {nodes})")
        hints_text = "".join(f"; for {shown(op)}: {h}" for op, h in self.hints.items())
        super().__init__(
            f"unsupported op types: {'; '.join(parts)} -- the workbench cannot import this "
            f"model; replace these ops or add their definitions to workbench.ops{hints_text}")


class FusionRefused(WorkbenchError):
    """A transformation is illegal; the message gives the reason."""


class BackendUnavailable(WorkbenchError):
    """The requested backend cannot run here (no GPU, no C compiler)."""


class OutOfMemory(WorkbenchError):
    """What a graph's values need does not fit in this machine's memory."""


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


class RankFailure(WorkbenchError):
    """A rank of a distributed run failed or hung: which rank, at which step, why (every
    rank's process was stopped)."""
