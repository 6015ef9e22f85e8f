"""Code generation: kernels as Python source for Numba (CPU) and Numba-CUDA (GPU)."""
