"""Submodules of Lucid modules that are single files (``lucid/accelerator.py``,
``lucid/profiler.py``, ``lucid/_higher_order_ops.py``): PyTorch's ``torch.accelerator.memory``,
``torch.profiler.profiler`` and ``torch._higher_order_ops.{cond,while_loop,scan,associative_scan,map,foreach_map}``.

NOTE [Submodules of file modules]
A module file cannot have submodules unless it has a ``__path__``. ``lucid/accelerator.py``
and ``lucid/profiler.py`` set ``__path__`` to the folders here, so ``import
lucid.accelerator.memory`` finds ``_module_paths/accelerator/memory.py`` as
``lucid.accelerator.memory`` (the module is not imported by ``import lucid``). Importing a
submodule binds it as an attribute of its parent: where a submodule has the name of one of the
parent's functions (``lucid._higher_order_ops.scan``), the parent imports its submodules when it
loads and binds its functions back, as ``torch._higher_order_ops`` does.
"""
