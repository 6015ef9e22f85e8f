"""Serialization of retorch ExportedPrograms (torch/_export/serde/ at torch v2.13.0)."""

from .serialize import FORMAT_VERSION, load, save

__all__ = ["FORMAT_VERSION", "load", "save"]
