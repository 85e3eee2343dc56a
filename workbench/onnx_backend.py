"""The workbench as a standard ONNX backend (``onnx.backend.base.Backend``).

The model is imported once (:func:`workbench.frontends.load_onnx`), planned
(``planner`` ``none`` or ``rules``) and compiled through :class:`workbench.session.Session`;
the returned rep runs it as often as asked:

    >>> import workbench.onnx_backend as wbo
    >>> rep = wbo.prepare("model.onnx", planner="rules", backend="cpu")  # doctest: +SKIP
    >>> y, = rep.run([x])                                                # doctest: +SKIP

``device`` follows the ONNX convention ("CPU", "CUDA"); with ``backend="auto"`` it
picks the workbench backend (cpu, cupy). ``backend="reference"`` runs each op's NumPy
reference.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from .errors import BackendUnavailable, GraphError, WorkbenchError
from .frontends import load_onnx
from .frontends.onnx.common import held_elem_types, widened
from .ir import Graph
from .runtime import gpu_available
from .session import Session

Runner = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


class WorkbenchRep(BackendRep):
    """A prepared model: ``run(inputs)`` takes a list (graph-input order) or a dict
    and returns the outputs in graph order as a namedtuple-like (index or name)."""

    def __init__(self, graph: Graph, runner: Runner, session: Any = None,
                 narrowed: Mapping[str, Any] | None = None):
        self.graph, self._runner, self.session = graph, runner, session
        self._outputs_type = namedtupledict("Outputs", list(graph.outputs))
        # outputs the model declares bfloat16, FP8, FP4, INT4...: held in a wider type
        # (already rounded or wrapped), handed back in the declared (ml_dtypes) type,
        # as the model's caller expects
        self._narrowed = dict(narrowed or {})

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        feeds = self._feeds(inputs)
        out = self._runner(feeds)
        return self._outputs_type(*[self._as_declared(o, np.asarray(out[o]))
                                    for o in self.graph.outputs])

    def _as_declared(self, name: str, a: np.ndarray) -> np.ndarray:
        dt = self._narrowed.get(name)
        return a if dt is None else a.astype(dt)

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        names = list(self.graph.inputs)
        if isinstance(inputs, Mapping):
            return {k: _held(v) for k, v in inputs.items()}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(names):
            raise GraphError(f"the model takes {len(names)} inputs ({', '.join(names)}), "
                             f"got {len(inputs)}; pass them in this order or as a dict")
        return {n: _held(a) for n, a in zip(names, inputs)}


def _held(a: Any) -> np.ndarray:
    """An input as the workbench holds it (bfloat16, FP8, FP4 as float32; INT4 and
    the like as int8/uint8)."""
    return widened(np.asarray(a))


def _narrowed_outputs(model: Any) -> dict[str, Any]:
    """Output name -> NumPy (ml_dtypes) type, for the outputs a model declares in a
    type the workbench holds wider."""
    try:
        proto = model if isinstance(model, onnx.ModelProto) else \
            onnx.load(str(model), load_external_data=False)
    except Exception:  # noqa: BLE001 -- load_onnx has already read it; nothing to add
        return {}
    held = held_elem_types()
    return {v.name: onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
            for v in proto.graph.output if v.type.tensor_type.elem_type in held}


def _resolve_backend(device: str, backend: str) -> str:
    """'auto' follows the ONNX device: CPU -> cpu, CUDA -> cupy."""
    if backend != "auto":
        return backend
    return "cupy" if Device(device).type == DeviceType.CUDA else "cpu"


def _runner(graph: Graph, planner: str, backend: str,
            matmul_precision: str = "float32") -> tuple[Runner, Any]:
    session = Session(graph, backend=backend, matmul_precision=matmul_precision)
    session.auto(planner)
    return session.run, session


class WorkbenchBackend(Backend):
    """``onnx.backend.base.Backend`` over the workbench importer and session."""

    @classmethod
    def prepare(cls, model: "onnx.ModelProto | str | Path", device: str = "CPU",
                planner: str = "rules", backend: str = "auto",
                input_shapes: Mapping[str, Sequence[int]] | None = None,
                matmul_precision: str = "float32", **kwargs: Any) -> WorkbenchRep:
        """Import, plan and compile ``model``; raises a WorkbenchError naming the cause.
        ``matmul_precision``: the Session's ("tf32": float32 matmuls on a GPU's tensor
        cores)."""
        for what, v in (("planner", planner), ("backend", backend)):
            if not isinstance(v, str):
                raise WorkbenchError(f"{what} must be a name, got {type(v).__name__}")
        if not cls.supports_device(device):
            raise BackendUnavailable(f"device {device!r:.40} is not available here; use 'CPU'")
        graph = load_onnx(model, input_shapes=input_shapes)
        run, session = _runner(graph, planner, _resolve_backend(device, backend),
                               matmul_precision)
        return WorkbenchRep(graph, run, session, _narrowed_outputs(model))

    @classmethod
    def run_model(cls, model: "onnx.ModelProto | str | Path", inputs: Any,
                  device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Any = None, **kwargs: Any) -> tuple[Any, ...]:
        raise NotImplementedError("the workbench runs whole models: wrap the node in a "
                                  "model (onnx.helper.make_model) and call prepare")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; CUDA when CuPy and a GPU are present."""
        try:
            kind = Device(device).type
        except (AttributeError, ValueError):
            return False
        if kind == DeviceType.CPU:
            return True
        return gpu_available()


def prepare(model: "onnx.ModelProto | str | Path", device: str = "CPU",
            planner: str = "rules", backend: str = "auto", **kwargs: Any) -> WorkbenchRep:
    """Module-level :meth:`WorkbenchBackend.prepare` (the onnx backend convention)."""
    return WorkbenchBackend.prepare(model, device, planner=planner, backend=backend, **kwargs)


def run_model(model: "onnx.ModelProto | str | Path", inputs: Any, device: str = "CPU",
              **kwargs: Any) -> tuple[Any, ...]:
    return WorkbenchBackend.run_model(model, inputs, device, **kwargs)


def run_node(node: onnx.NodeProto, inputs: Any, device: str = "CPU", **kwargs: Any):
    return WorkbenchBackend.run_node(node, inputs, device, **kwargs)


def supports_device(device: str) -> bool:
    return WorkbenchBackend.supports_device(device)


__all__ = ["WorkbenchBackend", "WorkbenchRep", "prepare", "run_model", "run_node",
           "supports_device"]
