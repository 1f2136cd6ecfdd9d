"""Every docstring example in the lucid package runs and prints what it shows.

Modules are found by walking the package; an example that needs an optional package
(SciPy, PyTorch, safetensors) is skipped where that package is missing.
"""
import doctest
import importlib
import importlib.util
import os
import pkgutil

import numpy as np
import pytest

import lucid

OPTIONAL = ("scipy", "torch", "safetensors", "matplotlib", "PIL", "tensorboard")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules():
    names = ["lucid"]
    for info in pkgutil.walk_packages(lucid.__path__, "lucid."):
        names.append(info.name)
    # lucid._core has no __init__.py (a namespace package), which walk_packages does not enter.
    core = os.path.join(lucid.__path__[0], "_core")
    names += [info.name for info in pkgutil.iter_modules([core], "lucid._core.")]
    return sorted(names)


def _needs_missing(test):
    src = "\n".join(ex.source for ex in test.examples)
    return [p for p in OPTIONAL if f"import {p}" in src or f"from {p}" in src
            if importlib.util.find_spec(p) is None]


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    ran = 0
    for test in finder.find(module, name, globs={"lucid": lucid, "np": np}):
        if not test.examples or _needs_missing(test):
            continue
        lucid.manual_seed(0)
        with np.printoptions(precision=8, suppress=False):
            runner.run(test, clear_globs=True)
        ran += 1
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name} (output above)"
