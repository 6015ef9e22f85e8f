"""Helpers for the labs' graded checks (``grading``) and the chapters' side-by-side tables."""
