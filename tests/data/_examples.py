"""Load a script of examples/ as a module (the example tests call its functions directly)."""
import importlib.util
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def load_example(name):
    """``examples/<name>.py`` as a fresh module."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
