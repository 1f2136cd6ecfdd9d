"""Submodules of Lucid modules that are single files (``lucid/accelerator.py``,
``lucid/profiler.py``): PyTorch's ``torch.accelerator.memory`` and ``torch.profiler.profiler``.

NOTE [Submodules of file modules]
A module file cannot have submodules unless it has a ``__path__``. ``lucid/accelerator.py``
and ``lucid/profiler.py`` set ``__path__`` to the folders here, so ``import
lucid.accelerator.memory`` finds ``_module_paths/accelerator/memory.py`` as
``lucid.accelerator.memory`` (the module is not imported by ``import lucid``).
"""
