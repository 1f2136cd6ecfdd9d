"""Differentiating with respect to an integer tensor is a TypeError (issue 8, item 3)."""
import numpy as np
import pytest

import lucid
import lucid.autograd.functional as AF
import lucid.func as F

XI = lucid.tensor([1, 2, 3])
XF = lucid.tensor([1.0, 2.0, 3.0], dtype=lucid.float64)


def cube(x):
    return (x ** 3).sum()


def square(x):
    return x * x


@pytest.mark.parametrize("call", [
    lambda x: AF.jacobian(square, x),
    lambda x: AF.jacobian(square, x, vectorize=True),
    lambda x: AF.hessian(cube, x),
    lambda x: AF.vjp(square, x, x),
    lambda x: AF.jvp(square, x, x),
    lambda x: AF.hvp(cube, x, x),
    lambda x: AF.vhp(cube, x, x),
    lambda x: AF.jacobian(lambda a, b: a * b, (XF, x)),
    lambda x: F.grad(cube)(x),
    lambda x: F.grad(lambda a, b: (a * b).sum(), argnums=(0, 1))(XF, x),
    lambda x: F.grad(lambda d: cube(d["x"]))({"x": x}),
    lambda x: F.vjp(square, x),
    lambda x: F.jvp(square, (x,), (x,)),
    lambda x: F.jacrev(square)(x),
    lambda x: F.jacfwd(square)(x),
    lambda x: F.hessian(cube)(x),
], ids=["jacobian", "jacobian_vec", "hessian", "vjp", "jvp", "hvp", "vhp", "jacobian_tuple",
        "func.grad", "func.grad_argnums", "func.grad_pytree", "func.vjp", "func.jvp", "jacrev",
        "jacfwd", "func.hessian"])
def test_integer_input_raises_type_error(call):
    with pytest.raises(TypeError, match="only floating point or complex Tensors can be differentiated.*int64"):
        call(XI)


def test_float_inputs_still_work():
    np.testing.assert_allclose(AF.jacobian(square, XF).numpy(), np.diag([2.0, 4.0, 6.0]))
    np.testing.assert_allclose(F.grad(cube)(XF).numpy(), [3.0, 12.0, 27.0])
    # an integer argument that is not differentiated is fine
    np.testing.assert_allclose(F.grad(lambda a, n: (a * n).sum())(XF, XI).numpy(), [1.0, 2.0, 3.0])
