"""Tests of oxillama.quant and the quant kernels."""
