"""Helpers of the DataLoader: collation and the worker loop. Mirrors torch/utils/data/_utils/."""
