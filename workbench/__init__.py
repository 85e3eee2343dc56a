"""Fusion Workbench: operator fusion and kernel stitching for deep-learning graphs.

    >>> import workbench as wb
    >>> g = wb.load("sample_graphs/layernorm.json")      # doctest: +SKIP
    >>> s = wb.Session(g, backend="cpu"); s.auto("rules"); s.measure()  # doctest: +SKIP
"""
from .errors import FusionRefused, WorkbenchError
from .frontends import load, load_onnx
from .dtypes import DType
from .ir import Graph, GraphBuilder, load_json, save_json
from .ir.repeat import Repeat, repeat
from .session import Session
from .repeat_session import RepeatSession
from .session_open import open_session

from .version import __version__


def load_artifact(path, backend: str = "auto", *, trusted_keys=None, require_signature=None):
    """Verify an exported artifact (directory or .zip) and return a callable model
    (imported on first use; see :func:`workbench.artifact.load_artifact`). Loading runs
    the artifact's compiled code: pass ``trusted_keys`` to accept only signed ones."""
    from .artifact import load_artifact as load_verified
    return load_verified(path, backend, trusted_keys=trusted_keys,
                         require_signature=require_signature)


def open(source, backend: str = "auto", seed: int = 0, display: bool = True,
         matmul_precision: str = "float32"):
    """The notebook app over a .json/.onnx path, a Graph, a Session or a repeat (its own
    app: docs/repeat.md), displayed in IPython (imports the widget libraries on first
    use; see :mod:`workbench.ui`)."""
    from .ui import open as open_app
    return open_app(source, backend=backend, seed=seed, display=display,
                    matmul_precision=matmul_precision)


def from_torch(module, example_inputs=(), *, name=None, dynamic: bool = False,
               training: bool = False, **train):
    """Import a torch.nn.Module through torch.export as a Graph (imports torch on first
    use; see :func:`workbench.frontends.torch.from_torch`); ``training=True`` (with
    ``loss=``, ``targets=``, ``optimizer=``) imports forward + backward (+ the optimizer
    step): :func:`workbench.frontends.torch.training.from_torch_training`."""
    if training or train:
        from .frontends.torch.training import from_torch_training
        return from_torch_training(module, example_inputs, name=name, **train)
    from .frontends.torch import from_torch as import_module
    return import_module(module, example_inputs, name=name, dynamic=dynamic)


def load_ipython_extension(ipython) -> None:
    """``%load_ext workbench``: adds the ``%workbench PATH`` line magic."""
    from .ui.magics import load_ipython_extension as load_magics
    load_magics(ipython)


__all__ = ["DType", "FusionRefused", "Graph", "GraphBuilder", "Repeat", "RepeatSession", "Session", "WorkbenchError",
           "from_torch", "load", "load_artifact", "load_ipython_extension", "load_json",
           "load_onnx", "open", "open_session", "repeat", "save_json", "__version__"]
