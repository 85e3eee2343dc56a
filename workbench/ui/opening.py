"""``wb.open``: the app a source opens in -- the graph app (``app.py``), a repeat's
(``repeat_app.py``) or a distributed program's (``dist_app.py``). Here rather than in
``app.py`` so that the other apps, which build on the graph app's parts, are not
imported by it (a circle otherwise)."""
from __future__ import annotations

import os

from ..session import Session
from ..session_kinds import is_repeat
from .app import WorkbenchApp
from .current_step import export_name
from .dist_app import is_distributed, open_dist
from .repeat_app import open_repeat


def open(source, backend: str = "auto", seed: int = 0, display: bool = True,
         matmul_precision: str = "float32") -> WorkbenchApp:
    """The app over ``source``: a path to a .json/.onnx file, a Graph or a Session
    (then ``backend``, ``seed`` and ``matmul_precision`` are the session's). In IPython
    it is displayed. A repeat (a Repeat, its .json file, a RepeatSession) opens in the
    repeat's app (ui/repeat_app.py); a distributed program (``Session(..., ranks=p)``, a
    DistProgram, a workbench.distributed file) in the distributed app (dist_app.py)."""
    if is_repeat(source) or type(source).__name__ == "RepeatSession":
        return open_repeat(source, backend=backend, seed=seed, display=display)
    if is_distributed(source):
        return _shown(open_dist(source, seed=seed), display)
    if isinstance(source, Session):
        session = source
    else:
        session = Session(os.fspath(source) if isinstance(source, os.PathLike) else source,
                          backend=backend, seed=seed, matmul_precision=matmul_precision)
    app = WorkbenchApp(session)
    # (torch's exporter names every graph main_graph: the file's name says more)
    app.export_path.value = export_name(session.graph.name, source)
    return _shown(app, display)


def _shown(app, display: bool):
    if display:
        try:
            from IPython import get_ipython
        except ImportError:
            return app
        if get_ipython() is not None:
            app._ipython_display_()
    return app

