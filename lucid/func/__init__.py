"""Composable function transforms (``torch.func`` / JAX style). See ARCHITECTURE.md."""
from .api import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize, vjp, vmap
from .functional_call import functional_call, replace_all_batch_norm_modules_, stack_module_state
from .functionalize import functionalize
from .pytree import tree_flatten, tree_map, tree_unflatten
from .rearrange import rearrange

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "vmap", "functional_call", "stack_module_state", "replace_all_batch_norm_modules_",
           "functionalize", "rearrange", "tree_flatten", "tree_unflatten", "tree_map"]


def debug_unwrap(tensor, *, recurse=True):
    """The value a transform's wrapper holds, for debugging, as ``torch.func.debug_unwrap``.

    Inside ``vmap`` that is the whole batched tensor (batch dim included), inside ``grad`` / ``jvp``
    the primal; ``recurse`` peels every transform level, else one. A plain tensor comes back as is.

    Examples
    --------
    >>> import lucid
    >>> from lucid.func import vmap, debug_unwrap
    >>> _ = vmap(lambda v: print(debug_unwrap(v).shape) or v)(lucid.zeros(3, 2))
    (3, 2)
    """
    from ._traces import _Tracer

    while isinstance(tensor, _Tracer):
        tensor = tensor._inner_value()
        if not recurse:
            break
    return tensor


__all__ += ["debug_unwrap"]
