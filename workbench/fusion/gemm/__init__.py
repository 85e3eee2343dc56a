"""The ``gemm`` template: a matmul (or a convolution) with its epilogue as one kernel,
or why not -- what a GEMM kernel may take apart from how its tiles are chosen.

A group fits when it holds one float32 or bfloat16 ``matmul`` (on a GPU float16 too)
whose operands are read from memory, directly or through layout ops in the kernel
(prologue views), and otherwise an epilogue reading the matmul's result: elementwise
ops at its rows, or a row reduction over them (a LayerNorm, a softmax) and after it a
second matmul (attention); or one convolution with an elementwise epilogue.

- :mod:`.analyze`: which of them a group is (``analyze_gemm``), or why none;
- legality -- :mod:`.operands` (operands through prologue views, the product through
  the views after it), :mod:`.legality` (dtypes, epilogues, the output written into);
- the kernels -- :mod:`.matmul` (one product), :mod:`.attention` and :mod:`.softmax`
  (two, the softmax between them online or not), :mod:`.conv` (a convolution's checks
  and tiles), :mod:`.conv_rule` (its form, by shape), :mod:`.direct` (a convolution
  computed directly), :mod:`.planes` (a plane at a time);
- tile choice -- :mod:`.tiles` (the CPU's tiles), :mod:`.left_pack` (A packed once
  per run where many column tiles read it), :mod:`.right_pack` (an activation B packed
  once per run), :mod:`.transposed` (a product of few rows against an activation B
  made transposed, B read in place), :mod:`.gpu_tiles` (a GPU's thread
  blocks), :mod:`.launch` (what a user or the tuner sets in place of the rule).

The tuned thresholds are frozen configurations beside their measurements
(``CpuTiles``, ``LeftPack``, ``RightPack``, ``TransposedProduct``, ``CpuAttention``,
``ConvRule``, ``DirectConv``, the GPU's
``BlockTile`` tables), each read by a small rule that picks by the problem's shape.
"""
