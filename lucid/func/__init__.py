"""Composable function transforms (``torch.func`` / JAX style). See ARCHITECTURE.md."""
from .api import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize, vjp, vmap
from .functional_call import functional_call, replace_all_batch_norm_modules_, stack_module_state
from .functionalize import functionalize
from .pytree import tree_flatten, tree_map, tree_unflatten

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "vmap", "functional_call", "stack_module_state", "replace_all_batch_norm_modules_", "functionalize", "tree_flatten", "tree_unflatten", "tree_map"]
