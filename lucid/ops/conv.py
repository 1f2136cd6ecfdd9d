"""placeholder: filled by its family's author"""
from __future__ import annotations

__all__ = []
