"""Messages about an artifact: one line each, naming the artifact, with what came from
its files shortened, so a hostile or corrupt file cannot flood the message."""
from __future__ import annotations

from typing import Any

from ..errors import ArtifactError


def artifact_error(where: str, what: str) -> ArtifactError:
    return ArtifactError(f"artifact {where}: {what}")


def show(x: Any, limit: int = 80) -> str:
    """A value from an artifact, for a one-line message: repr, shortened."""
    r = repr(x)
    return r if len(r) <= limit else r[:limit - 5] + "...'"


def one_line(text: str, limit: int = 300) -> str:
    """A (compiler's, library's) multi-line message as one line: its first line and its
    first line that names an error."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    pick = [lines[0]] + [ln for ln in lines[1:] if "error" in ln.lower()][:1]
    out = " | ".join(pick)
    return out if len(out) <= limit else out[:limit - 3] + "..."
