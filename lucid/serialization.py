"""Serialization: lucid.save / lucid.load (safetensors + JSON structure)."""
from __future__ import annotations

__all__ = []
