"""Messages in the drawing's words: the one place where the app translates the ids a
refusal or status line names into what a user sees in the graph.

The planner and the session name things by internal ids: values (``t4``), kernels
(``k5``) and nodes (``n12``). The drawing shows none of the first: an edge is an
arrow between two node boxes (``mul n3`` → ``add n4``), a kernel id is drawn only as
the label of a cluster of two or more ops, and a node inside a collapsed box is
hidden in it. A review found "regional t4" in a refusal with nothing named ``t4`` on
screen. So every line the app shows passes through :func:`drawn_text`:

- a value made by a node becomes its edge as drawn: ``mul n3 → add n4`` (``+1``
  counts further readers; ``mul n3 → (output)`` when only the graph reads it);
  graph inputs and outputs keep their names: the drawing labels them;
- a constant becomes ``constant → matmul n5`` (constants are not drawn);
- a single-op kernel's id gets its node: ``k5 (n5)``;
- a node inside a collapsed box gets the box: ``n12 (in s3)``.

A value named like a plain lowercase word (``one``, ``scores``) is left alone: it
cannot be told from the sentence's own words. Words in quotes are left alone: they repeat what the user typed. One pass over the
text, so what is put in is not translated again.

Example::

    >>> drawn_text("regional t4: ...", plan, box_of)            # doctest: +SKIP
    'regional reduce_mean n3 → add n4: ...'
"""
from __future__ import annotations

import re
from typing import Callable

from ..fusion import Plan

# a run of characters a name can hold (ONNX names have / . : -); quotes, spaces,
# brackets and commas end it
_TOKEN = re.compile(r"""(?<!['"])[^\s'"(),;\[\]{}]+""")
_TRAILING = ".:;,!?"
_PLAIN_WORD = re.compile(r"[a-z]+")


def drawn_text(text: str, plan: Plan, box_of: Callable[[str], str]) -> str:
    """``text`` with every internal id the drawing does not show replaced by what it
    shows (see the module docstring); ``box_of(node_id)`` is the box the node is
    drawn as now (itself, or a collapsed container)."""
    g = plan.graph
    kernels = {gr.id: gr for gr in plan.groups}
    shown = set(g.inputs) | set(g.outputs)

    def hidden_in(nid: str) -> str | None:
        box = box_of(nid)
        return None if box == nid else box

    def node(nid: str) -> str:
        box = hidden_in(nid)
        return nid if box is None else f"{nid} (in {box})"

    def value(v: str) -> str:
        maker = g.producer.get(v)
        readers = list(dict.fromkeys(c.id for c in g.consumers.get(v, ())))
        more = f" +{len(readers) - 1}" if len(readers) > 1 else ""
        ends = ([maker.id] if maker is not None else []) + readers[:1]
        boxes = list(dict.fromkeys(hidden_in(n) for n in ends))
        # one box named once: "mul n3 → add n4 (in s0)"
        same = boxes[0] if len(boxes) == 1 and boxes[0] is not None else None
        name = (lambda n: n) if same else node
        first = f"{g.node(readers[0]).op} {name(readers[0])}" if readers else "(output)"
        tail = f" (in {same})" if same else ""
        if maker is None:
            return f"constant → {first}{more}{tail}"
        return f"{maker.op} {name(maker.id)} → {first}{more}{tail}"

    def word(name: str) -> str | None:
        if name in shown:
            return None
        if name in g.value_map:
            # a value named like a plain word ("one", "scores") cannot be told from
            # the sentence's own words ("inside one kernel"): left as it is
            return None if _PLAIN_WORD.fullmatch(name) else value(name)
        if name in g.node_map:
            return None if box_of(name) == name else node(name)
        gr = kernels.get(name)
        if gr is not None and len(gr.nodes) == 1:   # (not drawn as a cluster)
            box = hidden_in(gr.nodes[0])
            return f"{name} ({gr.nodes[0]}" + (f", in {box})" if box else ")")
        return None

    def swap(m: re.Match) -> str:
        tok = m.group(0)
        if m.end() < len(text) and text[m.end()] in "'\"":
            return tok                                  # (quoted: the user's words)
        core = tok.rstrip(_TRAILING)
        for name in (tok, core) if core != tok else (tok,):
            new = word(name)
            if new is not None:
                return new + tok[len(name):]
        return tok

    return _TOKEN.sub(swap, text)
