"""Helpers that generated kernels import: torch/_inductor/runtime/ (triton_helpers.py's role)."""
