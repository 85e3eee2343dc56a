"""Import-time graph rewrites the front ends apply before a graph is handed on: ops on
constants alone computed once (``constant_folding``), zero pads folded into the
convolutions and pooling windows that read them (``pad_folding``), and for graphs from
``torch.export`` batched matmuls over merged batch axes (``batched_matmul``) and linear
layers over flattened rows (``matmul_rows``) taken over their own axes; what they share
(``reshape_chains``)."""
