"""A readable text form of a graph, one node per line (like a jaxpr)."""
from __future__ import annotations


def _fmt_attr(v) -> str:
    return "[" + ",".join(map(str, v)) + "]" if isinstance(v, tuple) else repr(v)


def format_graph(g) -> str:
    t = lambda n: f"{g.value(n).dtype.value}{list(g.value(n).shape)}"
    lines = [f"graph {g.name}(" + ", ".join(f"{i}: {t(i)}" for i in g.inputs) + ") {"]
    for c in g.constants:
        lines.append(f"  {c}: {t(c)} = const")
    for n in g.nodes:
        attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in n.attrs)
        outs = ", ".join(f"{o}: {t(o)}" for o in n.outputs)
        org = f"  # {n.origin.composite} {n.origin.source}" if n.origin else ""
        lines.append(f"  {n.id}: {outs} = {n.op}({', '.join(n.inputs)}"
                     f"{'; ' + attrs if attrs else ''}){org}")
    lines.append("  return " + ", ".join(g.outputs))
    lines.append("}")
    return "\n".join(lines)
