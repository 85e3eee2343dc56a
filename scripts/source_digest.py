"""Pin what codegen and planning produce, for refactors that must not change it.

For every sample graph (and a few synthetic ones at the mapping rule's boundaries),
under every planner, every thread mapping of every row kernel and every stitch scheme
of every internal edge, this writes the generated C and CUDA of each kernel, its launch,
the plan's description, the planners' decisions and the cost model's estimates to one
text file per case, plus ``digest.json`` (SHA-256 per case). The same graphs are also
planned for two CPUs (with and without a SIMD width the micro-kernel targets: its GEMM,
convolution and BLAS kernels) and for the H100 with TF32 allowed (tensor-core tiles);
``--zoo`` adds models of the zoo (torch needed) under those targets.

    python scripts/source_digest.py OUT_DIR [--only NAME] [--zoo]
    diff -r BEFORE_DIR AFTER_DIR        # what changed, case by case

The preludes (helpers shared by every kernel) are written once per target.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from itertools import chain
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "sample_graphs"))

from workbench.codegen import RENDERERS, lower_plan  # noqa: E402
from workbench.errors import FusionRefused  # noqa: E402
from workbench.frontends import load  # noqa: E402
from workbench.device import A100, H100, assumed_cpu  # noqa: E402
from workbench.fusion import Plan, run_planner  # noqa: E402
from workbench.fusion.cost import CostModel  # noqa: E402

MAPPINGS = ("warp", "block", "split", "thread", "auto")
SCHEMES = ("local", "regional", "global")
PLANNERS = ("none", "xla", "rules", "stitch")
# the other targets: (tag, device, matmul precision); the CPUs are assumed, not measured,
# so the digest is the same on every machine
TARGETS = (("cpu8-avx512", assumed_cpu("digest cpu", 8).with_(vector_bytes=64), "float32"),
           ("cpu8", assumed_cpu("digest cpu", 8), "float32"),
           ("h100-tf32", H100, "tf32"))
ZOO = (("bert", "float32"), ("resnet", "float32"), ("mobilenet_v2", "float32"),
       ("vit", "float32"), ("llama", "float32"), ("wav2vec2", "float32"),
       ("bert", "bfloat16"), ("resnet", "bfloat16"), ("vit", "bfloat16"))


def graphs() -> dict:
    import make_samples as ms
    out = {p.name: load(p) for p in sorted((ROOT / "sample_graphs").glob("*.json"))}
    out.update({p.name: load(p) for p in sorted((ROOT / "sample_graphs").glob("*.onnx"))})
    # the mapping rule's boundaries: few long rows (split), few short rows (warp with
    # fewer rows per block), one row
    out["ln_96x16384"] = ms.layernorm(96, 16384)
    out["ln_40x512"] = ms.layernorm(40, 512)
    out["softmax_1x8192"] = ms.softmax(1, 8192)
    # rows whose length no 16-byte vector divides (GPT-2's 50257-word vocabulary, 77
    # CLIP tokens, bfloat16 rows of 1002)
    out["ln_64x1001"] = ms.layernorm(64, 1001)
    out["softmax_96x77"] = ms.softmax(96, 77)
    out["xent_8x50257"] = ms.cross_entropy(8, 50257)
    out["bgrln_bf16_64x1002"] = ms.bias_gelu_residual_layernorm_bf16(64, 1002)
    out["chain_4"] = ms.block_chain(4)
    out["stack_300"] = ms.transformer_stack(300)
    return out


def describe(plan: Plan, models) -> str:
    lines = [plan.describe()]
    for k in lower_plan(plan):
        lines.append(f"== {k.name} {k.launch} shared={k.shared_bytes} flops={k.flops} "
                     f"read={k.bytes_read} written={k.bytes_written}")
        for target, r in RENDERERS.items():
            lines.append(f"-- {target}")
            lines.append(r.kernel(k))
    for m in models:
        lines.append(f"== estimates on {m.device.name}")
        for gid, e in m.predict(plan).groups:
            lines.append(f"{gid} {e.seconds!r} {e.limiter}")
    return "\n".join(lines)


def cases(g, models):
    """(name, text) for each plan reached from g."""
    for planner in PLANNERS:
        for m in models if planner == "stitch" else models[:1]:
            plan, log = run_planner(planner, g, model=m)
            tag = f"{planner}-{m.device.name.split()[1]}" if planner == "stitch" else planner
            yield tag, describe(plan, models) + "\n== decisions\n" + "\n".join(map(str, log))
            if planner not in ("rules", "stitch"):
                continue
            for gr in plan.groups:
                if gr.schedule.kind == "row_reduce":
                    for mp in MAPPINGS:
                        try:
                            p2 = plan.set_mapping(gr.id, mp)
                        except FusionRefused as e:
                            yield f"{tag}-{gr.id}-map-{mp}", f"refused: {e}"
                            continue
                        yield f"{tag}-{gr.id}-map-{mp}", describe(p2, models)
                for v, _ in gr.schemes:
                    for sc in SCHEMES:
                        try:
                            p2 = plan.set_scheme(v, sc)
                        except FusionRefused as e:
                            yield f"{tag}-{gr.id}-{v}-{sc}", f"refused: {e}"
                            continue
                        yield f"{tag}-{gr.id}-{v}-{sc}", describe(p2, models)


def target_plan(planner: str, g, device, precision: str) -> Plan:
    return run_planner(planner, g, model=CostModel.for_device(device),
                       matmul_precision=precision)[0]


def target_cases(g):
    """(name, text) for the rules and stitch plans (and none's) of g on each target."""
    for tag, device, precision in TARGETS:
        model = CostModel.for_device(device)
        for planner in ("none", "rules", "stitch"):
            try:
                plan = target_plan(planner, g, device, precision)
            except FusionRefused as e:
                yield f"{tag}-{planner}", f"refused: {e}"
                continue
            yield f"{tag}-{planner}", describe(plan, [model])


def zoo_graphs() -> dict:
    from workbench.testing import zoo
    return {f"zoo-{name}-{dtype}": zoo.import_torch(zoo.build(name, dtype=dtype))
            for name, dtype in ZOO}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", help="one graph name")
    ap.add_argument("--zoo", action="store_true", help="also the zoo's models (torch)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    models = [CostModel.for_device(H100), CostModel.for_device(A100)]
    digest = {}
    for target, r in RENDERERS.items():
        for tensor_cores in (False, True):
            (args.out / f"prelude{'-tc' if tensor_cores else ''}.{target}").write_text(
                r.prelude(tensor_cores))
    every = graphs()
    if args.zoo:
        every.update(zoo_graphs())
    for name, g in every.items():
        if args.only and name != args.only:
            continue
        both = target_cases(g) if name.startswith("zoo-") else chain(
            cases(g, models), target_cases(g))
        for tag, text in both:
            key = f"{name}--{tag}"
            (args.out / f"{key}.txt").write_text(text)
            digest[key] = hashlib.sha256(text.encode()).hexdigest()
        print(f"{name}: {sum(1 for k in digest if k.startswith(name + '--'))} cases",
              file=sys.stderr)
    (args.out / "digest.json").write_text(json.dumps(digest, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
