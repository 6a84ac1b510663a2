"""The kernels under test: one module per op (Triton kernels plus torch rows)."""
