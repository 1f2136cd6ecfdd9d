"""Composable function transforms (``torch.func`` / JAX style). See ARCHITECTURE.md."""
from .api import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize, vjp, vmap
from .functional_call import functional_call, stack_module_state
from .pytree import tree_flatten, tree_map, tree_unflatten

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "vmap", "functional_call", "stack_module_state", "tree_flatten", "tree_unflatten", "tree_map"]
