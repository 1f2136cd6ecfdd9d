"""DeepXDE's PyTorch backend (lululxvi/deepxde) run on Lucid (``import lucid as torch``), batch 21:

- ``deepxde/gradients/``: ``jacobian.py`` (the ``Jacobian`` ABC and the ``Jacobians`` cache keyed by
  ``(ys, xs)``), ``gradients_reverse.py`` (``JacobianReverse`` through
  ``torch.autograd.grad(..., create_graph=True)``, ``Hessian``/``Hessians`` built on the cached
  gradient), ``gradients_forward.py`` (``JacobianForward`` through ``torch.func.jvp`` of the network
  callable, the Hessian as a jvp of a jvp) and ``gradients.py`` (the ``config.autodiff`` switch).
  Checked against closed forms, against a NumPy propagation of values, Jacobians and Hessians
  through a tanh network, and (the PINN loss's parameter gradient, a third derivative) against
  float64 finite differences.
- ``deepxde/nn/pytorch/``: ``nn.py`` (``NN`` with input/output transforms), ``fnn.py`` (``FNN``,
  ``PFNN``), ``deeponet.py`` (``DeepONet``, ``DeepONetCartesianProd``, ``PODDeepONet``: ``einsum``
  and the in-place ``x += self.b``), ``mionet.py`` (``MIONetCartesianProd`` with its merger
  variants, ``PODMIONet``), ``msffn.py`` (``MsFFN``/``STMsFFN``: frozen Fourier weights drawn by
  ``nn.init.normal_`` into a ``ParameterList``), with ``nn/activations.py`` and
  ``nn/initializers.py``.
- ``deepxde/backend/pytorch/tensor.py`` (every function, the sparse ``sparse_tensor`` /
  ``sparse_dense_matmul`` pair differentiated in its values) and ``deepxde/losses.py`` (the
  backend-generic MSE and mean l2 relative error).
- ``deepxde/data/pde.py`` (``PDE.losses``), ``icbc`` (``DirichletBC``, ``NeumannBC``,
  ``OperatorBC``, ``PointSetBC`` errors), ``model.py``'s ``_compile_pytorch`` (``outputs_losses``
  with ``grad.clear()``, ``torch.stack(losses)``, ``losses *= loss_weights``, the closure
  ``train_step``; ``_outputs_losses`` with the network's ``requires_grad_(False)``;
  ``_train_pytorch_lbfgs`` reading ``opt.state_dict()["state"][0]["n_iter"]``; ``save``/``restore``
  through ``torch.save``/``torch.load``; external trainable variables) and
  ``optimizers/pytorch/optimizers.py`` (Adam, L-BFGS with ``strong_wolfe``, the "inverse time"
  ``LambdaLR``), on ``examples/pinn_forward/Poisson_Dirichlet_1d.py`` (trained by Adam, L-BFGS and
  in forward mode), ``Euler_beam.py`` (a fourth derivative as the Hessian of the Hessian, trained:
  fifth-order derivatives reach the weights), the residuals of ``Burgers.py``, ``heat.py``
  (network replaced by the exact solution) and ``diffusion_1d_exactBC.py`` (hard constraint
  through ``apply_output_transform``), and ``examples/pinn_inverse/diffusion_1d_inverse.py``
  (``dde.Variable`` learnt, checked against Adam by hand).
- ``deepxde/zcs/gradient.py``: ``LazyGrad`` (zero coordinate shift: derivatives with respect to
  scalar leaves added to the trunk inputs, then with respect to a dummy all-ones tensor), checked
  against NumPy and against ``dde.grad`` on the same DeepONet.

Only the ``pytorch`` branches are kept (the other backends' branches are cut out). Data are
synthetic, sizes tiny and float64 unless said; each page is a function of the module it is handed
as ``torch`` and the ``*_torch_parity`` tests run the same text on PyTorch with the same weights.

Adapted where Lucid differs on purpose: ``torch.autograd.grad(y, self.xs, ...)[0]`` (and ZCS's
``torch.autograd.grad(y, z, ...)[0]``, ``(y, self.a)``) pass the input as ``[self.xs]`` (README
"Differences from PyTorch": a single input tensor gives back a single gradient in Lucid, so the
original ``[0]`` would take the gradient's first row: every PINN residual silently wrong);
``Model.predict(x, operator=pde)`` is used in reverse mode only, and the forward-mode Euler beam
keeps its Dirichlet BC only (DeepXDE hands BCs the output tensor, where forward mode needs the
``(output, network)`` pair: its derivative BCs do not run in forward mode on PyTorch either).

Fixed on the way: the second derivative of a ReLU-family network (``relu``, ``leaky_relu``,
``hardtanh``) with trainable weights w.r.t. its input raised "one of the differentiated Tensors
... is not reachable from the outputs" (PyTorch: zeros): the first derivative, the mask times
the weights, requires grad through the weights only, so it was not joined to the input
(``lucid/autograd/grad.py``, NOTE [Constant gradients under create_graph]); a DeepXDE model with
``activation="relu"`` could not form its PDE residual.
"""
import math
import numbers
from abc import ABC, abstractmethod
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.func  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401


# ---------------------------------------------------------------------------------------------
# deepxde/backend/pytorch/tensor.py, deepxde/losses.py, nn/activations.py, nn/initializers.py
# ---------------------------------------------------------------------------------------------

def deepxde_backend(torch, real="float64"):
    """The pytorch backend module ``bkd`` and the config/losses/activations/initializers that
    read it."""
    bkd = SimpleNamespace()
    bkd.lib = torch

    def data_type_dict():
        return {
            "float16": torch.float16,
            "float32": torch.float32,
            "float64": torch.float64,
            "uint8": torch.uint8,
            "int8": torch.int8,
            "int16": torch.int16,
            "int32": torch.int32,
            "int64": torch.int64,
            "bool": torch.bool,
        }

    def is_gpu_available():
        return torch.cuda.is_available()

    def is_tensor(obj):
        return torch.is_tensor(obj)

    def shape(input_tensor):
        return list(input_tensor.shape)

    def size(tensor):
        return torch.numel(tensor)

    def ndim(input_tensor):
        return input_tensor.dim()

    def transpose(tensor, axes=None):
        if axes is None:
            axes = tuple(range(tensor.dim())[::-1])
        return torch.permute(tensor, axes)

    def reshape(tensor, shape):
        return torch.reshape(tensor, shape)

    def Variable(initial_value, dtype=None):
        return torch.tensor(initial_value, dtype=dtype, requires_grad=True)

    def as_tensor(data, dtype=None):
        if isinstance(data, torch.Tensor):
            if dtype is None or data.dtype == dtype:
                return data
            return data.type(dtype=dtype)
        return torch.as_tensor(data, dtype=dtype)

    def sparse_tensor(indices, values, shape):
        return torch.sparse_coo_tensor(list(zip(*indices)), values, shape, requires_grad=True)

    def from_numpy(np_array):
        return torch.as_tensor(np_array)

    def to_numpy(input_tensor):
        return input_tensor.detach().cpu().numpy()

    def concat(values, axis):
        return torch.cat(values, axis)

    def stack(values, axis):
        return torch.stack(values, axis)

    def expand_dims(tensor, axis):
        return torch.unsqueeze(tensor, axis)

    def reverse(tensor, axis):
        return torch.flip(tensor, axis)

    def roll(tensor, shift, axis):
        return torch.roll(tensor, shift, axis)

    def lgamma(x):
        return torch.lgamma(x)

    def elu(x):
        return torch.nn.functional.elu(x)

    def relu(x):
        return torch.nn.functional.relu(x)

    def selu(x):
        return torch.nn.functional.selu(x)

    def sigmoid(x):
        return torch.nn.functional.sigmoid(x)

    def silu(x):
        return torch.nn.functional.silu(x)

    def sin(x):
        return torch.sin(x)

    def cos(x):
        return torch.cos(x)

    def exp(x):
        return torch.exp(x)

    def square(x):
        return torch.square(x)

    def tanh(x):
        return torch.tanh(x)

    def pow(x, y):
        return torch.pow(x, y)

    def mean(input_tensor, dim, keepdims=False):
        return torch.mean(input_tensor, dim, keepdim=keepdims)

    def reduce_mean(input_tensor):
        return torch.mean(input_tensor)

    def sum(input_tensor, dim, keepdims=False):
        return torch.sum(input_tensor, dim, keepdim=keepdims)

    def reduce_sum(input_tensor):
        return torch.sum(input_tensor)

    def norm(tensor, ord=None, axis=None, keepdims=False):
        return torch.linalg.norm(tensor, ord=ord, dim=axis, keepdim=keepdims)

    def zeros(shape, dtype):
        return torch.zeros(shape, dtype=dtype)

    def zeros_like(input_tensor):
        return torch.zeros_like(input_tensor)

    def matmul(x, y):
        return torch.mm(x, y)

    def sparse_dense_matmul(x, y):
        return torch.sparse.mm(x, y)

    for k, v in list(locals().items()):
        if callable(v) and not k.startswith("_") and k not in ("torch", "bkd"):
            setattr(bkd, k, v)

    config = SimpleNamespace(real=lambda lib: getattr(lib, real), autodiff="reverse")

    # deepxde/losses.py (the backend-generic part)
    def mean_squared_error(y_true, y_pred):
        return bkd.reduce_mean(bkd.square(y_true - y_pred))

    def mean_l2_relative_error(y_true, y_pred):
        return bkd.reduce_mean(bkd.norm(y_true - y_pred, axis=1) / bkd.norm(y_true, axis=1))

    LOSS_DICT = {
        "mean squared error": mean_squared_error,
        "MSE": mean_squared_error,
        "mse": mean_squared_error,
        "mean l2 relative error": mean_l2_relative_error,
    }

    def get_loss(identifier):
        if isinstance(identifier, (list, tuple)):
            return list(map(get_loss, identifier))
        if isinstance(identifier, str):
            return LOSS_DICT[identifier]
        if callable(identifier):
            return identifier
        raise ValueError("Could not interpret loss function identifier:", identifier)

    # deepxde/nn/activations.py
    def linear(x):
        return x

    def get_activation(identifier):
        if identifier is None:
            return linear
        if isinstance(identifier, str):
            return {
                "elu": bkd.elu,
                "relu": bkd.relu,
                "selu": bkd.selu,
                "sigmoid": bkd.sigmoid,
                "silu": bkd.silu,
                "sin": bkd.sin,
                "swish": bkd.silu,
                "tanh": bkd.tanh,
            }[identifier]
        if callable(identifier):
            return identifier
        raise TypeError("Could not interpret activation function identifier: {}".format(identifier))

    # deepxde/nn/initializers.py (initializer_dict_torch)
    INITIALIZER_DICT = {
        "Glorot normal": torch.nn.init.xavier_normal_,
        "Glorot uniform": torch.nn.init.xavier_uniform_,
        "He normal": torch.nn.init.kaiming_normal_,
        "He uniform": torch.nn.init.kaiming_uniform_,
        "zeros": torch.nn.init.zeros_,
    }

    def get_initializer(identifier):
        if isinstance(identifier, str):
            return INITIALIZER_DICT[identifier]
        if callable(identifier):
            return identifier
        raise ValueError("Could not interpret initializer identifier: " + str(identifier))

    losses = SimpleNamespace(get=get_loss, mean_squared_error=mean_squared_error,
                             mean_l2_relative_error=mean_l2_relative_error)
    activations = SimpleNamespace(get=get_activation)
    initializers = SimpleNamespace(get=get_initializer)
    return SimpleNamespace(bkd=bkd, config=config, losses=losses, activations=activations,
                           initializers=initializers, torch=torch)


# ---------------------------------------------------------------------------------------------
# deepxde/gradients/ (jacobian.py, gradients_reverse.py, gradients_forward.py, gradients.py)
# ---------------------------------------------------------------------------------------------

def deepxde_gradients(torch, config, bkd):
    backend_name = "pytorch"

    class Jacobian(ABC):
        """J[i, j] = dy_i / dx_j, lazily evaluated."""

        def __init__(self, ys, xs):
            self.ys = ys
            self.xs = xs

            if backend_name in ["tensorflow", "pytorch"]:
                if config.autodiff == "reverse":
                    # For reverse-mode AD, only a tensor is passed.
                    self.dim_y = ys.shape[-1]
                elif config.autodiff == "forward":
                    # For forward-mode AD, a tuple of a tensor and a callable is passed,
                    # similar to backend jax.
                    self.dim_y = ys[0].shape[-1]
            self.dim_x = xs.shape[1]

            self.J = {}

        @abstractmethod
        def __call__(self, i=None, j=None):
            if i is None and j is None:
                if self.dim_x > 1 or self.dim_y > 1:
                    raise ValueError("i and j cannot be both None.")
                i = 0
                j = 0
            if i is not None and not 0 <= i < self.dim_y:
                raise ValueError("i={} is not valid.".format(i))
            if j is not None and not 0 <= j < self.dim_x:
                raise ValueError("j={} is not valid.".format(j))

    class Jacobians:
        def __init__(self, JacobianClass):
            self.JacobianClass = JacobianClass
            self.Js = {}

        def __call__(self, ys, xs, i=None, j=None):
            if backend_name in ["pytorch", "paddle"]:
                key = (ys, xs)
            if key not in self.Js:
                self.Js[key] = self.JacobianClass(ys, xs)
            return self.Js[key](i, j)

        def clear(self):
            """Clear cached Jacobians."""
            self.Js = {}

    # gradients_reverse.py
    class JacobianReverse(Jacobian):
        def __call__(self, i=None, j=None):
            super().__call__(i=i, j=j)
            # Compute a column is not supported in reverse mode, unless there is only one
            # output.
            if i is None:
                if self.dim_y > 1:
                    raise NotImplementedError(
                        "Reverse-mode autodiff doesn't support computing a column."
                    )
                i = 0
            ndim_y = bkd.ndim(self.ys)
            if ndim_y == 3:
                raise NotImplementedError("Reverse-mode autodiff doesn't support 3D output")

            # Compute J[i, :]
            if i not in self.J:
                # TODO: retain_graph=True has memory leak?
                y = self.ys[:, i : i + 1] if self.dim_y > 1 else self.ys
                self.J[i] = torch.autograd.grad(
                    y, [self.xs], grad_outputs=torch.ones_like(y), create_graph=True
                )[0]

            if j is None or self.dim_x == 1:
                return self.J[i]

            # Compute J[i, j]
            if (i, j) not in self.J:
                self.J[i, j] = self.J[i][:, j : j + 1]
            return self.J[i, j]

    def jacobian_reverse(ys, xs, i=None, j=None):
        return jacobian_reverse._Jacobians(ys, xs, i=i, j=j)

    jacobian_reverse._Jacobians = Jacobians(JacobianReverse)

    class Hessian:
        def __init__(self, ys, xs, component=0):
            dim_y = ys.shape[1]
            if component >= dim_y:
                raise ValueError(
                    "The component of ys={} cannot be larger than the dimension={}.".format(
                        component, dim_y
                    )
                )

            # There is no duplicate computation of grad_y.
            grad_y = jacobian_reverse(ys, xs, i=component, j=None)
            self.H = JacobianReverse(grad_y, xs)

        def __call__(self, i=0, j=0):
            """Returns H[`i`, `j`]."""
            return self.H(j, i)

    class Hessians:
        def __init__(self):
            self.Hs = {}

        def __call__(self, ys, xs, component=0, i=0, j=0):
            key = (ys, xs, component)
            if key not in self.Hs:
                self.Hs[key] = Hessian(ys, xs, component=component)
            return self.Hs[key](i, j)

        def clear(self):
            """Clear cached Hessians."""
            self.Hs = {}

    def hessian_reverse(ys, xs, component=0, i=0, j=0):
        return hessian_reverse._Hessians(ys, xs, component=component, i=i, j=j)

    hessian_reverse._Hessians = Hessians()

    def clear_reverse():
        jacobian_reverse._Jacobians.clear()
        hessian_reverse._Hessians.clear()

    # gradients_forward.py
    class JacobianForward(Jacobian):
        def __call__(self, i=None, j=None):
            super().__call__(i=i, j=j)
            # Compute a row is not supported in forward mode, unless there is only one
            # input.
            if j is None:
                if self.dim_x > 1:
                    raise NotImplementedError(
                        "Forward-mode autodiff doesn't support computing gradient."
                    )
                j = 0

            # Compute J[:, j]
            if j not in self.J:
                # Here we use torch.func.jvp to compute the gradient of a function.
                tangent = torch.zeros_like(self.xs)
                tangent[:, j] = 1
                grad_fn = lambda x: torch.func.jvp(self.ys[1], (x,), (tangent,))[1]
                self.J[j] = (grad_fn(self.xs), grad_fn)

            if i is None or self.dim_y == 1:
                return self.J[j]

            # Compute J[i, j]
            if (i, j) not in self.J:
                self.J[i, j] = (
                    self.J[j][0][..., i : i + 1],
                    lambda x: self.J[j][1](x)[i : i + 1],
                )
            return self.J[i, j]

    def jacobian_forward(ys, xs, i=None, j=None):
        return jacobian_forward._Jacobians(ys, xs, i=i, j=j)

    jacobian_forward._Jacobians = Jacobians(JacobianForward)

    def hessian_forward(ys, xs, component=0, i=0, j=0):
        dys_xj = jacobian_forward(ys, xs, i=None, j=j)
        return jacobian_forward(dys_xj, xs, i=component, j=i)

    def clear_forward():
        jacobian_forward._Jacobians.clear()

    # gradients.py
    def jacobian(ys, xs, i=None, j=None):
        if config.autodiff == "reverse":
            return jacobian_reverse(ys, xs, i=i, j=j)
        if config.autodiff == "forward":
            return jacobian_forward(ys, xs, i=i, j=j)

    def hessian(ys, xs, component=0, i=0, j=0):
        if config.autodiff == "reverse":
            return hessian_reverse(ys, xs, component=component, i=i, j=j)
        if config.autodiff == "forward":
            return hessian_forward(ys, xs, component=component, i=i, j=j)

    def clear():
        if config.autodiff == "reverse":
            clear_reverse()
        elif config.autodiff == "forward":
            clear_forward()

    return SimpleNamespace(jacobian=jacobian, hessian=hessian, clear=clear,
                           JacobianReverse=JacobianReverse, JacobianForward=JacobianForward,
                           jacobian_reverse=jacobian_reverse, hessian_reverse=hessian_reverse,
                           jacobian_forward=jacobian_forward)


def make_dde(torch, real="float64", autodiff="reverse"):
    d = deepxde_backend(torch, real)
    d.config.autodiff = autodiff
    d.grad = deepxde_gradients(torch, d.config, d.bkd)
    d.nn = deepxde_nn(torch, d)
    return d


# ---------------------------------------------------------------------------------------------
# deepxde/nn/pytorch/ (nn.py, fnn.py, deeponet.py, mionet.py)
# ---------------------------------------------------------------------------------------------

def deepxde_nn(torch, dde):
    activations, initializers, config = dde.activations, dde.initializers, dde.config

    class NN(torch.nn.Module):
        """Base class for all neural network modules."""

        def __init__(self):
            super().__init__()
            self.regularizer = None
            self._input_transform = None
            self._output_transform = None

        def apply_feature_transform(self, transform):
            self._input_transform = transform

        def apply_output_transform(self, transform):
            self._output_transform = transform

        def num_trainable_parameters(self):
            return sum(v.numel() for v in self.parameters() if v.requires_grad)

    class FNN(NN):
        """Fully-connected neural network."""

        def __init__(self, layer_sizes, activation, kernel_initializer, regularization=None):
            super().__init__()
            if isinstance(activation, list):
                if not (len(layer_sizes) - 1) == len(activation):
                    raise ValueError(
                        "Total number of activation functions do not match with sum of hidden layers and output layer!"
                    )
                self.activation = list(map(activations.get, activation))
            else:
                self.activation = activations.get(activation)
            initializer = initializers.get(kernel_initializer)
            initializer_zero = initializers.get("zeros")
            self.regularizer = regularization

            self.linears = torch.nn.ModuleList()
            for i in range(1, len(layer_sizes)):
                self.linears.append(
                    torch.nn.Linear(
                        layer_sizes[i - 1], layer_sizes[i], dtype=config.real(torch)
                    )
                )
                initializer(self.linears[-1].weight)
                initializer_zero(self.linears[-1].bias)

        def forward(self, inputs):
            x = inputs
            if self._input_transform is not None:
                x = self._input_transform(x)
            for j, linear in enumerate(self.linears[:-1]):
                x = (
                    self.activation[j](linear(x))
                    if isinstance(self.activation, list)
                    else self.activation(linear(x))
                )
            x = self.linears[-1](x)
            if self._output_transform is not None:
                x = self._output_transform(inputs, x)
            return x

    class PFNN(NN):
        """Parallel fully-connected network that uses independent sub-networks for each
        network output."""

        def __init__(self, layer_sizes, activation, kernel_initializer):
            super().__init__()
            self.activation = activations.get(activation)
            initializer = initializers.get(kernel_initializer)
            initializer_zero = initializers.get("zeros")

            if len(layer_sizes) <= 1:
                raise ValueError("must specify input and output sizes")
            if not isinstance(layer_sizes[0], int):
                raise ValueError("input size must be integer")
            if not isinstance(layer_sizes[-1], int):
                raise ValueError("output size must be integer")

            n_output = layer_sizes[-1]

            def make_linear(n_input, n_output):
                linear = torch.nn.Linear(n_input, n_output, dtype=config.real(torch))
                initializer(linear.weight)
                initializer_zero(linear.bias)
                return linear

            self.layers = torch.nn.ModuleList()
            for i in range(1, len(layer_sizes) - 1):
                prev_layer_size = layer_sizes[i - 1]
                curr_layer_size = layer_sizes[i]
                if isinstance(curr_layer_size, (list, tuple)):
                    if len(curr_layer_size) != n_output:
                        raise ValueError(
                            "number of sub-layers should equal number of network outputs"
                        )
                    if isinstance(prev_layer_size, (list, tuple)):
                        # e.g. [8, 8, 8] -> [16, 16, 16]
                        self.layers.append(
                            torch.nn.ModuleList(
                                [
                                    make_linear(prev_layer_size[j], curr_layer_size[j])
                                    for j in range(n_output)
                                ]
                            )
                        )
                    else:  # e.g. 64 -> [8, 8, 8]
                        self.layers.append(
                            torch.nn.ModuleList(
                                [
                                    make_linear(prev_layer_size, curr_layer_size[j])
                                    for j in range(n_output)
                                ]
                            )
                        )
                else:  # e.g. 64 -> 64
                    if not isinstance(prev_layer_size, int):
                        raise ValueError(
                            "cannot rejoin parallel subnetworks after splitting"
                        )
                    self.layers.append(make_linear(prev_layer_size, curr_layer_size))

            # output layers
            if isinstance(layer_sizes[-2], (list, tuple)):  # e.g. [3, 3, 3] -> 3
                self.layers.append(
                    torch.nn.ModuleList(
                        [make_linear(layer_sizes[-2][j], 1) for j in range(n_output)]
                    )
                )
            else:
                self.layers.append(make_linear(layer_sizes[-2], n_output))

        def forward(self, inputs):
            x = inputs
            if self._input_transform is not None:
                x = self._input_transform(x)

            for layer in self.layers[:-1]:
                if isinstance(layer, torch.nn.ModuleList):
                    if isinstance(x, list):
                        x = [self.activation(f(x_)) for f, x_ in zip(layer, x)]
                    else:
                        x = [self.activation(f(x)) for f in layer]
                else:
                    x = self.activation(layer(x))

            # output layers
            if isinstance(x, list):
                x = torch.cat([f(x_) for f, x_ in zip(self.layers[-1], x)], dim=1)
            else:
                x = self.layers[-1](x)

            if self._output_transform is not None:
                x = self._output_transform(inputs, x)
            return x

    class DeepONet(NN):
        """Deep operator network."""

        def __init__(self, layer_sizes_branch, layer_sizes_trunk, activation, kernel_initializer):
            super().__init__()
            if isinstance(activation, dict):
                activation_branch = activations.get(activation["branch"])
                self.activation_trunk = activations.get(activation["trunk"])
            else:
                activation_branch = self.activation_trunk = activations.get(activation)
            if callable(layer_sizes_branch[1]):
                # User-defined network
                self.branch = layer_sizes_branch[1]
            else:
                # Fully connected network
                self.branch = FNN(layer_sizes_branch, activation_branch, kernel_initializer)
            self.trunk = FNN(layer_sizes_trunk, self.activation_trunk, kernel_initializer)
            self.b = torch.nn.parameter.Parameter(torch.tensor(0.0))

        def forward(self, inputs):
            x_func = inputs[0]
            x_loc = inputs[1]
            # Branch net to encode the input function
            x_func = self.branch(x_func)
            # Trunk net to encode the domain of the output function
            if self._input_transform is not None:
                x_loc = self._input_transform(x_loc)
            x_loc = self.activation_trunk(self.trunk(x_loc))
            # Dot product
            if x_func.shape[-1] != x_loc.shape[-1]:
                raise AssertionError(
                    "Output sizes of branch net and trunk net do not match."
                )
            x = torch.einsum("bi,bi->b", x_func, x_loc)
            x = torch.unsqueeze(x, 1)
            # Add bias
            x += self.b
            if self._output_transform is not None:
                x = self._output_transform(inputs, x)
            return x

    class DeepONetCartesianProd(NN):
        """Deep operator network for dataset in the format of Cartesian product."""

        def __init__(self, layer_sizes_branch, layer_sizes_trunk, activation,
                     kernel_initializer, regularization=None):
            super().__init__()
            if isinstance(activation, dict):
                activation_branch = activations.get(activation["branch"])
                self.activation_trunk = activations.get(activation["trunk"])
            else:
                activation_branch = self.activation_trunk = activations.get(activation)
            if callable(layer_sizes_branch[1]):
                # User-defined network
                self.branch = layer_sizes_branch[1]
            else:
                # Fully connected network
                self.branch = FNN(layer_sizes_branch, activation_branch, kernel_initializer)
            self.trunk = FNN(layer_sizes_trunk, self.activation_trunk, kernel_initializer)
            self.b = torch.nn.parameter.Parameter(torch.tensor(0.0))
            self.regularizer = regularization

        def forward(self, inputs):
            x_func = inputs[0]
            x_loc = inputs[1]
            # Branch net to encode the input function
            x_func = self.branch(x_func)
            # Trunk net to encode the domain of the output function
            if self._input_transform is not None:
                x_loc = self._input_transform(x_loc)
            x_loc = self.activation_trunk(self.trunk(x_loc))
            # Dot product
            if x_func.shape[-1] != x_loc.shape[-1]:
                raise AssertionError(
                    "Output sizes of branch net and trunk net do not match."
                )
            x = torch.einsum("bi,ni->bn", x_func, x_loc)
            # Add bias
            x += self.b

            if self._output_transform is not None:
                x = self._output_transform(inputs, x)
            return x

    class PODDeepONet(NN):
        """Deep operator network with proper orthogonal decomposition (POD)."""

        def __init__(self, pod_basis, layer_sizes_branch, activation, kernel_initializer,
                     layer_sizes_trunk=None, regularization=None):
            super().__init__()
            if isinstance(activation, dict):
                activation_branch = activations.get(activation["branch"])
                self.activation_trunk = activations.get(activation["trunk"])
            else:
                activation_branch = self.activation_trunk = activations.get(activation)

            self.pod_basis = torch.as_tensor(pod_basis, dtype=torch.float32)
            if callable(layer_sizes_branch[1]):
                # User-defined network
                self.branch = layer_sizes_branch[1]
            else:
                # Fully connected network
                self.branch = FNN(layer_sizes_branch, activation_branch, kernel_initializer)
            self.trunk = None
            if layer_sizes_trunk is not None:
                self.trunk = FNN(
                    layer_sizes_trunk, self.activation_trunk, kernel_initializer
                )
                self.b = torch.nn.parameter.Parameter(torch.tensor(0.0))
            self.regularizer = regularization

        def forward(self, inputs):
            x_func = inputs[0]
            x_loc = inputs[1]

            x_func = self.branch(x_func)
            if self.trunk is None:
                # POD only
                x = torch.einsum("bi,ni->bn", x_func, self.pod_basis)
            else:
                x_loc = self.activation_trunk(self.trunk(x_loc))
                x = torch.einsum("bi,ni->bn", x_func, torch.cat((self.pod_basis, x_loc), 1))
                x += self.b
            if self._output_transform is not None:
                x = self._output_transform(inputs, x)
            return x

    class MIONetCartesianProd(NN):
        """MIONet with two input functions for Cartesian product format."""

        def __init__(self, layer_sizes_branch1, layer_sizes_branch2, layer_sizes_trunk,
                     activation, kernel_initializer, regularization=None,
                     trunk_last_activation=False, merge_operation="mul",
                     layer_sizes_merger=None, output_merge_operation="mul",
                     layer_sizes_output_merger=None):
            super().__init__()

            if isinstance(activation, dict):
                self.activation_branch1 = activations.get(activation["branch1"])
                self.activation_branch2 = activations.get(activation["branch2"])
                self.activation_trunk = activations.get(activation["trunk"])
            else:
                self.activation_branch1 = (
                    self.activation_branch2
                ) = self.activation_trunk = activations.get(activation)
            if callable(layer_sizes_branch1[1]):
                # User-defined network
                self.branch1 = layer_sizes_branch1[1]
            else:
                # Fully connected network
                self.branch1 = FNN(
                    layer_sizes_branch1, self.activation_branch1, kernel_initializer
                )
            if callable(layer_sizes_branch2[1]):
                # User-defined network
                self.branch2 = layer_sizes_branch2[1]
            else:
                # Fully connected network
                self.branch2 = FNN(
                    layer_sizes_branch2, self.activation_branch2, kernel_initializer
                )
            if layer_sizes_merger is not None:
                self.activation_merger = activations.get(activation["merger"])
                if callable(layer_sizes_merger[1]):
                    # User-defined network
                    self.merger = layer_sizes_merger[1]
                else:
                    # Fully connected network
                    self.merger = FNN(
                        layer_sizes_merger, self.activation_merger, kernel_initializer
                    )
            else:
                self.merger = None
            if layer_sizes_output_merger is not None:
                self.activation_output_merger = activations.get(activation["output merger"])
                if callable(layer_sizes_output_merger[1]):
                    # User-defined network
                    self.output_merger = layer_sizes_output_merger[1]
                else:
                    # Fully connected network
                    self.output_merger = FNN(
                        layer_sizes_output_merger,
                        self.activation_output_merger,
                        kernel_initializer,
                    )
            else:
                self.output_merger = None
            self.trunk = FNN(layer_sizes_trunk, self.activation_trunk, kernel_initializer)
            self.b = torch.nn.parameter.Parameter(torch.tensor(0.0))
            self.regularizer = regularization
            self.trunk_last_activation = trunk_last_activation
            self.merge_operation = merge_operation
            self.output_merge_operation = output_merge_operation

        def forward(self, inputs):
            x_func1 = inputs[0]
            x_func2 = inputs[1]
            x_loc = inputs[2]
            # Branch net to encode the input function
            y_func1 = self.branch1(x_func1)
            y_func2 = self.branch2(x_func2)
            if self.merge_operation == "cat":
                x_merger = torch.cat((y_func1, y_func2), 1)
            else:
                if y_func1.shape[-1] != y_func2.shape[-1]:
                    raise AssertionError(
                        "Output sizes of branch1 net and branch2 net do not match."
                    )
                if self.merge_operation == "add":
                    x_merger = y_func1 + y_func2
                elif self.merge_operation == "mul":
                    x_merger = torch.mul(y_func1, y_func2)
                else:
                    raise NotImplementedError(
                        f"{self.merge_operation} operation to be implimented"
                    )
            # Optional merger net
            if self.merger is not None:
                y_func = self.merger(x_merger)
            else:
                y_func = x_merger
            # Trunk net to encode the domain of the output function
            if self._input_transform is not None:
                y_loc = self._input_transform(x_loc)
            y_loc = self.trunk(x_loc)
            if self.trunk_last_activation:
                y_loc = self.activation_trunk(y_loc)
            # Dot product
            if y_func.shape[-1] != y_loc.shape[-1]:
                raise AssertionError(
                    "Output sizes of merger net and trunk net do not match."
                )
            # output merger net
            if self.output_merger is None:
                y = torch.einsum("ip,jp->ij", y_func, y_loc)
            else:
                y_func = y_func[:, None, :]
                y_loc = y_loc[None, :]
                if self.output_merge_operation == "mul":
                    y = torch.mul(y_func, y_loc)
                elif self.output_merge_operation == "add":
                    y = y_func + y_loc
                elif self.output_merge_operation == "cat":
                    y_func = y_func.repeat(1, y_loc.shape[1], 1)
                    y_loc = y_loc.repeat(y_func.shape[0], 1, 1)
                    y = torch.cat((y_func, y_loc), dim=2)
                shape0 = y.shape[0]
                shape1 = y.shape[1]
                y = y.reshape(shape0 * shape1, -1)
                y = self.output_merger(y)
                y = y.reshape(shape0, shape1)
            # Add bias
            y += self.b
            if self._output_transform is not None:
                y = self._output_transform(inputs, y)
            return y

    class PODMIONet(NN):
        """MIONet with two input functions and proper orthogonal decomposition (POD)."""

        def __init__(self, pod_basis, layer_sizes_branch1, layer_sizes_branch2, activation,
                     kernel_initializer, layer_sizes_trunk=None, regularization=None,
                     trunk_last_activation=False, merge_operation="mul", layer_sizes_merger=None):
            super().__init__()

            if isinstance(activation, dict):
                self.activation_branch1 = activations.get(activation["branch1"])
                self.activation_branch2 = activations.get(activation["branch2"])
                self.activation_trunk = activations.get(activation["trunk"])
                self.activation_merger = activations.get(activation["merger"])
            else:
                self.activation_branch1 = (
                    self.activation_branch2
                ) = self.activation_trunk = activations.get(activation)
            self.pod_basis = torch.as_tensor(pod_basis, dtype=torch.float32)
            if callable(layer_sizes_branch1[1]):
                self.branch1 = layer_sizes_branch1[1]
            else:
                self.branch1 = FNN(
                    layer_sizes_branch1, self.activation_branch1, kernel_initializer
                )
            if callable(layer_sizes_branch2[1]):
                self.branch2 = layer_sizes_branch2[1]
            else:
                self.branch2 = FNN(
                    layer_sizes_branch2, self.activation_branch2, kernel_initializer
                )
            if layer_sizes_merger is not None:
                if callable(layer_sizes_merger[1]):
                    self.merger = layer_sizes_merger[1]
                else:
                    self.merger = FNN(
                        layer_sizes_merger, self.activation_merger, kernel_initializer
                    )
            else:
                self.merger = None
            self.trunk = None
            if layer_sizes_trunk is not None:
                self.trunk = FNN(
                    layer_sizes_trunk, self.activation_trunk, kernel_initializer
                )
                self.b = torch.nn.parameter.Parameter(torch.tensor(0.0))
            self.regularizer = regularization
            self.trunk_last_activation = trunk_last_activation
            self.merge_operation = merge_operation

        def forward(self, inputs):
            x_func1 = inputs[0]
            x_func2 = inputs[1]
            x_loc = inputs[2]
            # Branch net to encode the input function
            y_func1 = self.branch1(x_func1)
            y_func2 = self.branch2(x_func2)
            # connect two branch outputs
            if self.merge_operation == "cat":
                x_merger = torch.cat((y_func1, y_func2), 1)
            else:
                if y_func1.shape[-1] != y_func2.shape[-1]:
                    raise AssertionError(
                        "Output sizes of branch1 net and branch2 net do not match."
                    )
                if self.merge_operation == "add":
                    x_merger = y_func1 + y_func2
                elif self.merge_operation == "mul":
                    x_merger = torch.mul(y_func1, y_func2)
                else:
                    raise NotImplementedError(
                        f"{self.merge_operation} operation to be implimented"
                    )
            # Optional merger net
            if self.merger is not None:
                y_func = self.merger(x_merger)
            else:
                y_func = x_merger
            # Dot product
            if self.trunk is None:
                # POD only
                y = torch.einsum("bi,ni->bn", y_func, self.pod_basis)
            else:
                y_loc = self.trunk(x_loc)
                if self.trunk_last_activation:
                    y_loc = self.activation_trunk(y_loc)
                y = torch.einsum("bi,ni->bn", y_func, torch.cat((self.pod_basis, y_loc), 1))
                y += self.b
            if self._output_transform is not None:
                y = self._output_transform(inputs, y)
            return y

    nn = torch.nn
    F = torch.nn.functional

    class MsFFN(NN):
        """Multi-scale fourier feature networks."""

        def __init__(self, layer_sizes, activation, kernel_initializer, sigmas, dropout_rate=0):
            super().__init__()
            self.activation = activations.get(activation)
            self.dropout_rate = dropout_rate
            self.sigmas = sigmas  # list or tuple
            self.fourier_feature_weights = None
            initializer = initializers.get(kernel_initializer)
            initializer_zero = initializers.get("zeros")

            self.b = nn.ParameterList()
            for sigma in self.sigmas:
                param = nn.Parameter(
                    torch.empty(layer_sizes[0], layer_sizes[1] // 2)
                )
                nn.init.normal_(param, mean=0.0, std=sigma)
                param.requires_grad_(False)  #freeze parameters
                self.b.append(param)

            self.linears = nn.ModuleList()
            for i in range(2, len(layer_sizes) - 1):
                linear = nn.Linear(layer_sizes[i - 1], layer_sizes[i])
                initializer(linear.weight)
                initializer_zero(linear.bias)
                self.linears.append(linear)

            self._dense = nn.Linear(layer_sizes[-2] * 2, layer_sizes[-1])
            initializer(self._dense.weight)
            initializer_zero(self._dense.bias)

        def forward(self, inputs):
            x = inputs
            if self._input_transform is not None:
                x = self._input_transform(x)

            # fourier feature layer
            yb = [
                self._fourier_feature_forward(x, self.b[i])
                for i in range(len(self.sigmas))
            ]
            y = [elem[0] for elem in yb]
            self.fourier_feature_weights = [elem[1] for elem in yb]

            # fully-connected layers
            y = [self._fully_connected_forward(_y) for _y in y]

            # concatenate all the fourier features
            y = torch.cat(y, dim=1)
            y = self._dense(y)

            if self._output_transform is not None:
                y = self._output_transform(inputs, y)
            return y

        def _fourier_feature_forward(self, y, b):
            # y: [N, in_dim], b: [in_dim, layer_sizes[1] // 2]
            proj = torch.matmul(y, b)
            y_ff = torch.cat(
                [torch.cos(proj), torch.sin(proj)],
                dim=1,
            )
            return y_ff, b

        def _fully_connected_forward(self, y):
            for linear in self.linears:
                y = self.activation(linear(y))
                if self.dropout_rate > 0:
                    y = F.dropout(y, p=self.dropout_rate, training=self.training)
            return y

    class STMsFFN(MsFFN):
        """Spatio-temporal multi-scale fourier feature networks."""

        def __init__(self, layer_sizes, activation, kernel_initializer, sigmas_x, sigmas_t,
                     dropout_rate=0):
            super().__init__(
                layer_sizes,
                activation,
                kernel_initializer,
                [],
                dropout_rate,
            )
            for sigma in sigmas_x:
                param = nn.Parameter(
                    torch.empty(layer_sizes[0] - 1, layer_sizes[1] // 2)
                )
                nn.init.normal_(param, mean=0.0, std=sigma)
                param.requires_grad_(False) # freeze parameters
                self.b.append(param)

            for sigma in sigmas_t:
                param = nn.Parameter(
                    torch.empty(1, layer_sizes[1] // 2)
                )
                nn.init.normal_(param, mean=0.0, std=sigma)
                param.requires_grad_(False) # freeze parameters
                self.b.append(param)

            self.sigmas_x = sigmas_x
            self.sigmas_t = sigmas_t

        def forward(self, inputs):
            x = inputs
            if self._input_transform is not None:
                # The last column should be function of t.
                x = self._input_transform(x)

            # fourier feature layer for space (x)
            yb_x = [
                self._fourier_feature_forward(x[:, :-1], self.b[i])
                for i in range(len(self.sigmas_x))
            ]
            # fourier feature layer for time (t)
            offset = len(self.sigmas_x)
            yb_t = [
                self._fourier_feature_forward(x[:, -1:], self.b[offset + i])
                for i in range(len(self.sigmas_t))
            ]
            self.fourier_feature_weights = [elem[1] for elem in (yb_x + yb_t)]

            # fully-connected layers (reuse)
            y_x = [self._fully_connected_forward(_yb[0]) for _yb in yb_x]
            y_t = [self._fully_connected_forward(_yb[0]) for _yb in yb_t]

            # point-wise multiplication layer
            y = [torch.mul(_y_x, _y_t) for _y_x in y_x for _y_t in y_t]

            # concatenate all the fourier features
            y = torch.cat(y, dim=1)
            y = self._dense(y)

            if self._output_transform is not None:
                y = self._output_transform(inputs, y)

            return y

    return SimpleNamespace(NN=NN, FNN=FNN, PFNN=PFNN, DeepONet=DeepONet, MsFFN=MsFFN, STMsFFN=STMsFFN,
                           DeepONetCartesianProd=DeepONetCartesianProd, PODDeepONet=PODDeepONet,
                           MIONetCartesianProd=MIONetCartesianProd, PODMIONet=PODMIONet)


# ---------------------------------------------------------------------------------------------
# deepxde/icbc DirichletBC.error, data/pde.py PDE.losses, model.py _compile_pytorch,
# optimizers/pytorch/optimizers.py
# ---------------------------------------------------------------------------------------------

def deepxde_model(torch, dde, LBFGS_options=None):
    bkd, config, grad, losses_module = dde.bkd, dde.config, dde.grad, dde.losses
    backend_name = "pytorch"
    LBFGS_options = LBFGS_options or {"maxcor": 100, "ftol": 0, "gtol": 1e-8, "maxiter": 6,
                                      "maxfun": None, "maxls": 50}
    LBFGS_options.setdefault("iter_per_step", min(1000, LBFGS_options["maxiter"]))
    LBFGS_options.setdefault("fun_per_step", int(LBFGS_options["iter_per_step"] * 1.25))

    class DirichletBC:
        """Dirichlet boundary conditions: y(x) = func(x)."""

        def __init__(self, func, component=0):
            self.func = func
            self.component = component

        def error(self, X, inputs, outputs, beg, end, aux_var=None):
            values = bkd.as_tensor(self.func(X[beg:end]))
            return outputs[beg:end, self.component : self.component + 1] - values

    class NeumannBC:
        """Neumann boundary conditions: dy/dn(x) = func(x) (on an interval: normal -1 / +1)."""

        def __init__(self, func, component=0):
            self.func = func
            self.component = component

        def boundary_normal(self, X, beg, end, aux_var):
            return bkd.as_tensor(np.where(np.isclose(X[beg:end], 0), -1.0, 1.0))

        def normal_derivative(self, X, inputs, outputs, beg, end):
            dydx = grad.jacobian(outputs, inputs, i=self.component, j=None)[beg:end]
            n = self.boundary_normal(X, beg, end, None)
            return bkd.sum(dydx * n, 1, keepdims=True)

        def error(self, X, inputs, outputs, beg, end, aux_var=None):
            values = bkd.as_tensor(self.func(X[beg:end]))
            return self.normal_derivative(X, inputs, outputs, beg, end) - values

    class OperatorBC:
        """General operator boundary conditions: func(inputs, outputs, X) = 0."""

        def __init__(self, func):
            self.func = func

        def error(self, X, inputs, outputs, beg, end, aux_var=None):
            return self.func(inputs, outputs, X)[beg:end]

    class PointSetBC:
        """Dirichlet boundary condition for a set of points."""

        def __init__(self, points, values, component=0):
            self.points = np.array(points, dtype=config.real(np))
            self.values = bkd.as_tensor(values, dtype=config.real(bkd.lib))
            self.component = component

        def error(self, X, inputs, outputs, beg, end, aux_var=None):
            if isinstance(self.component, numbers.Number):
                return outputs[beg:end, self.component : self.component + 1] - self.values
            return outputs[beg:end, self.component] - self.values

    class PDE:
        """``data.PDE`` with its training points given (BC points first, then the PDE points)."""

        def __init__(self, pde, bcs, train_x_bcs, train_x_all):
            self.pde = pde
            self.bcs = bcs if isinstance(bcs, (list, tuple)) else [bcs]
            self.num_bcs = list(map(len, train_x_bcs))
            self.train_x_bc = np.vstack(train_x_bcs) if train_x_bcs else np.empty([0, train_x_all.shape[-1]])
            self.train_x = np.vstack((self.train_x_bc, train_x_all))
            self.train_y = None

        def losses(self, targets, outputs, loss_fn, inputs, model, aux=None):
            if backend_name in ["tensorflow.compat.v1", "paddle"]:
                outputs_pde = outputs
            elif backend_name in ["tensorflow", "pytorch"]:
                if config.autodiff == "reverse":
                    outputs_pde = outputs
                elif config.autodiff == "forward":
                    # forward-mode AD requires functions
                    outputs_pde = (outputs, aux[0])

            f = []
            if self.pde is not None:
                f = self.pde(inputs, outputs_pde)
                if not isinstance(f, (list, tuple)):
                    f = [f]

            if not isinstance(loss_fn, (list, tuple)):
                loss_fn = [loss_fn] * (len(f) + len(self.bcs))
            elif len(loss_fn) != len(f) + len(self.bcs):
                raise ValueError(
                    "There are {} errors, but only {} losses.".format(
                        len(f) + len(self.bcs), len(loss_fn)
                    )
                )

            bcs_start = np.cumsum([0] + self.num_bcs)
            bcs_start = list(map(int, bcs_start))
            error_f = [fi[bcs_start[-1] :] for fi in f]
            losses = [
                loss_fn[i](bkd.zeros_like(error), error) for i, error in enumerate(error_f)
            ]
            for i, bc in enumerate(self.bcs):
                beg, end = bcs_start[i], bcs_start[i + 1]
                # The same BC points are used for training and testing.
                error = bc.error(self.train_x, inputs, outputs, beg, end)
                losses.append(loss_fn[len(error_f) + i](bkd.zeros_like(error), error))
            return losses

        def train_next_batch(self, batch_size=None):
            return self.train_x, self.train_y

    def _get_learningrate_scheduler(optim, decay):
        if decay is None:
            return None
        if decay[0] == "step":
            return torch.optim.lr_scheduler.StepLR(optim, step_size=decay[1], gamma=decay[2])
        elif decay[0] == "inverse time":
            return torch.optim.lr_scheduler.LambdaLR(
                optim, lambda step: 1 / (1 + decay[2] * (step / decay[1]))
            )
        raise NotImplementedError(
            f"{decay[0]} learning rate scheduler to be implemented for backend pytorch."
        )

    def get_optimizer(params, optimizer, learning_rate=None, decay=None, weight_decay=0):
        """Retrieves an Optimizer instance."""
        if isinstance(optimizer, torch.optim.Optimizer):
            optim = optimizer
        elif optimizer in ["L-BFGS", "L-BFGS-B"]:
            if weight_decay > 0:
                raise ValueError("L-BFGS optimizer doesn't support weight_decay > 0")
            optim = torch.optim.LBFGS(
                params,
                lr=1,
                max_iter=LBFGS_options["iter_per_step"],
                max_eval=LBFGS_options["fun_per_step"],
                tolerance_grad=LBFGS_options["gtol"],
                tolerance_change=LBFGS_options["ftol"],
                history_size=LBFGS_options["maxcor"],
                line_search_fn=("strong_wolfe" if LBFGS_options["maxls"] > 0 else None),
            )
        else:
            if learning_rate is None:
                raise ValueError("No learning rate for {}.".format(optimizer))
            if optimizer == "sgd":
                optim = torch.optim.SGD(params, lr=learning_rate, weight_decay=weight_decay)
            elif optimizer == "adam":
                optim = torch.optim.Adam(params, lr=learning_rate, weight_decay=weight_decay)
            else:
                raise NotImplementedError(f"{optimizer} to be implemented for backend pytorch.")
        lr_scheduler = _get_learningrate_scheduler(optim, decay)
        return optim, lr_scheduler

    class Model:
        def __init__(self, data, net):
            self.data = data
            self.net = net
            self.external_trainable_variables = []
            self.losshistory = []

        def compile(self, optimizer, lr=None, loss="MSE", decay=None, loss_weights=None,
                    external_trainable_variables=None):
            self.opt_name = optimizer
            loss_fn = losses_module.get(loss)
            if external_trainable_variables is None:
                self.external_trainable_variables = []
            else:
                if not isinstance(external_trainable_variables, list):
                    external_trainable_variables = [external_trainable_variables]
                self.external_trainable_variables = external_trainable_variables
            self._compile_pytorch(lr, loss_fn, decay, loss_weights)

        def _compile_pytorch(self, lr, loss_fn, decay, loss_weights):
            """pytorch"""

            def outputs(training, inputs):
                self.net.train(mode=training)
                with torch.no_grad():
                    if isinstance(inputs, tuple):
                        inputs = tuple(
                            map(lambda x: torch.as_tensor(x).requires_grad_(), inputs)
                        )
                    else:
                        inputs = torch.as_tensor(inputs)
                        inputs.requires_grad_()
                # Clear cached Jacobians and Hessians.
                grad.clear()
                return self.net(inputs)

            def outputs_losses(training, inputs, targets, losses_fn):
                self.net.train(mode=training)
                if isinstance(inputs, tuple):
                    inputs = tuple(
                        map(lambda x: torch.as_tensor(x).requires_grad_(), inputs)
                    )
                else:
                    inputs = torch.as_tensor(inputs)
                    inputs.requires_grad_()
                outputs_ = self.net(inputs)
                # Data losses
                if targets is not None:
                    targets = torch.as_tensor(targets)
                # if forward-mode AD is used, then a forward call needs to be passed
                aux = [self.net] if config.autodiff == "forward" else None
                losses = losses_fn(targets, outputs_, loss_fn, inputs, self, aux=aux)
                if not isinstance(losses, list):
                    losses = [losses]
                losses = torch.stack(losses)
                # Weighted losses
                if loss_weights is not None:
                    losses *= torch.as_tensor(loss_weights)
                # Clear cached Jacobians and Hessians.
                grad.clear()
                return outputs_, losses

            def outputs_losses_train(inputs, targets):
                return outputs_losses(True, inputs, targets, self.data.losses)

            def outputs_losses_test(inputs, targets):
                return outputs_losses(False, inputs, targets, self.data.losses)

            trainable_variables = (
                list(self.net.parameters()) + self.external_trainable_variables
            )
            if self.net.regularizer is None:
                self.opt, self.lr_scheduler = get_optimizer(
                    trainable_variables, self.opt_name, learning_rate=lr, decay=decay
                )
            else:
                if self.net.regularizer[0] == "l2":
                    self.opt, self.lr_scheduler = get_optimizer(
                        trainable_variables,
                        self.opt_name,
                        learning_rate=lr,
                        decay=decay,
                        weight_decay=self.net.regularizer[1],
                    )

            def train_step(inputs, targets):
                def closure():
                    losses = outputs_losses_train(inputs, targets)[1]
                    total_loss = torch.sum(losses)
                    self.opt.zero_grad()
                    total_loss.backward()
                    return total_loss

                self.opt.step(closure)
                if self.lr_scheduler is not None:
                    self.lr_scheduler.step()

            # Callables
            self.outputs = outputs
            self.outputs_losses_train = outputs_losses_train
            self.outputs_losses_test = outputs_losses_test
            self.train_step = train_step

        def _outputs_losses(self, training, inputs, targets):
            if training:
                outputs_losses = self.outputs_losses_train
            else:
                outputs_losses = self.outputs_losses_test
            self.net.requires_grad_(requires_grad=False)
            outs = outputs_losses(inputs, targets)
            self.net.requires_grad_()
            return bkd.to_numpy(outs[0]), bkd.to_numpy(outs[1])

        def _train_step(self, inputs, targets):
            self.train_step(inputs, targets)

        def predict(self, x, operator=None):
            self.net.eval()
            inputs = torch.as_tensor(x)
            inputs.requires_grad_()
            outputs = self.net(inputs)
            if operator is None:
                return bkd.to_numpy(outputs)
            y = operator(inputs, outputs)
            grad.clear()
            return bkd.to_numpy(y)

        def train(self, iterations=None, display_every=1000):
            X, y = self.data.train_next_batch()
            self.losshistory.append(self._outputs_losses(True, X, y)[1])
            if self.opt_name in ["L-BFGS", "L-BFGS-B"]:
                self._train_pytorch_lbfgs()
            else:
                for i in range(iterations):
                    X, y = self.data.train_next_batch()
                    self._train_step(X, y)
                    if (i + 1) % display_every == 0 or i + 1 == iterations:
                        self.losshistory.append(self._outputs_losses(True, X, y)[1])
            return self.losshistory

        def save(self, save_path, protocol="backend", verbose=0):
            save_path = f"{save_path}-{len(self.losshistory)}"
            if protocol == "backend":
                save_path += ".pt"
                checkpoint = {
                    "model_state_dict": self.net.state_dict(),
                    "optimizer_state_dict": self.opt.state_dict(),
                }
                torch.save(checkpoint, save_path)
            return save_path

        def restore(self, save_path, device=None, verbose=0):
            if device is not None:
                checkpoint = torch.load(save_path, map_location=torch.device(device))
            else:
                checkpoint = torch.load(save_path)
            self.net.load_state_dict(checkpoint["model_state_dict"])
            self.opt.load_state_dict(checkpoint["optimizer_state_dict"])

        def _train_pytorch_lbfgs(self):
            prev_n_iter = 0
            self.lbfgs_iters = []
            while prev_n_iter < LBFGS_options["maxiter"]:
                X, y = self.data.train_next_batch()
                self._train_step(X, y)
                n_iter = self.opt.state_dict()["state"][0]["n_iter"]
                self.lbfgs_iters.append(n_iter)
                if prev_n_iter == n_iter:
                    # Converged
                    break
                self.losshistory.append(self._outputs_losses(True, X, y)[1])
                prev_n_iter = n_iter

    return SimpleNamespace(DirichletBC=DirichletBC, NeumannBC=NeumannBC, OperatorBC=OperatorBC,
                           PointSetBC=PointSetBC, PDE=PDE,
                           Model=Model, get=get_optimizer)


# ---------------------------------------------------------------------------------------------
# deepxde/zcs/model.py (process_inputs_zcs) and deepxde/zcs/gradient.py (LazyGrad)
# ---------------------------------------------------------------------------------------------

def deepxde_zcs(torch):
    backend_name = "pytorch"

    def process_inputs_zcs(inputs):
        # get inputs
        branch_inputs, trunk_inputs = inputs

        # convert to tensors with grad disabled
        branch_inputs = torch.as_tensor(branch_inputs)
        trunk_inputs = torch.as_tensor(trunk_inputs)

        # create ZCS scalars
        n_dim_crds = trunk_inputs.shape[1]
        zcs_scalars = [
            torch.as_tensor(0.0).requires_grad_() for _ in range(n_dim_crds)
        ]

        # add ZCS to truck inputs
        zcs_vector = torch.stack(zcs_scalars)
        trunk_inputs = trunk_inputs + zcs_vector[None, :]

        # return inputs and ZCS scalars
        return (branch_inputs, trunk_inputs), {"leaves": zcs_scalars}

    class LazyGrad:
        """Gradients for ZCS with lazy evaluation."""

        def __init__(self, zcs_parameters, u):
            self.zcs_parameters = zcs_parameters
            self.n_dims = len(zcs_parameters["leaves"])

            # create tensor $a_{ij}$
            if backend_name == "pytorch":
                self.a = torch.ones_like(u).requires_grad_()

            # omega
            omega = (u * self.a).sum()

            # cached lower-order derivatives of omega
            self.cached_omega_grads = {
                # the only initial element is omega itself, with all orders being zero
                (0,)
                * self.n_dims: omega
            }

        def grad_wrt_z(self, y, z):
            if backend_name == "pytorch":
                return torch.autograd.grad(y, [z], create_graph=True)[0]

        def grad_wrt_a(self, y):
            if backend_name == "pytorch":
                return torch.autograd.grad(y, [self.a], create_graph=True)[0]

        def compute(self, required_orders):
            if required_orders in self.cached_omega_grads.keys():
                # derivative w.r.t. a
                return self.grad_wrt_a(self.cached_omega_grads[required_orders])

            # find the start
            orders = np.array(required_orders)
            exists = np.array(list(self.cached_omega_grads.keys()))
            diffs = orders[None, :] - exists
            # existing orders no greater than target element-wise
            avail_indices = np.where(diffs.min(axis=1) >= 0)[0]
            # start from the closet
            start_index = np.argmin(diffs[avail_indices].sum(axis=1))
            start_orders = exists[avail_indices][start_index]

            # dim loop
            for i, zi in enumerate(self.zcs_parameters["leaves"]):
                # order loop
                while start_orders[i] != required_orders[i]:
                    omega_grad = self.grad_wrt_z(
                        self.cached_omega_grads[tuple(start_orders)], zi
                    )
                    start_orders[i] += 1
                    self.cached_omega_grads[tuple(start_orders)] = omega_grad

            # derivative w.r.t. a
            return self.grad_wrt_a(self.cached_omega_grads[required_orders])

    return SimpleNamespace(process_inputs_zcs=process_inputs_zcs, LazyGrad=LazyGrad)


# ---------------------------------------------------------------------------------------------
# NumPy references and shared helpers
# ---------------------------------------------------------------------------------------------

def _np(t):
    return t.detach().cpu().numpy()


def _weights(rng, net, scale=0.6):
    """Deterministic weights for every parameter of ``net``, by name (same on both libraries)."""
    return {k: rng.standard_normal(tuple(p.shape)) * scale for k, p in net.named_parameters()}


def _load(torch, net, W):
    with torch.no_grad():
        for k, p in net.named_parameters():
            p.copy_(torch.as_tensor(W[k], dtype=p.dtype))


def _np_fnn(W, prefix, n_layers, x, last_act=False):
    """Value, Jacobian (N, out, d) and Hessian (N, out, d, d) of a tanh ``FNN`` with weights
    ``W[prefix + 'linears.k.weight']``, propagated layer by layer in float64."""
    n, d = x.shape
    h, J, H = x, np.broadcast_to(np.eye(d), (n, d, d)).copy(), np.zeros((n, d, d, d))
    for k in range(n_layers):
        Wk, bk = W[f"{prefix}linears.{k}.weight"], W[f"{prefix}linears.{k}.bias"]
        h, J, H = h @ Wk.T + bk, np.einsum("oi,nid->nod", Wk, J), np.einsum("oi,nide->node", Wk, H)
        if k < n_layers - 1 or last_act:
            a = np.tanh(h)
            s = 1 - a ** 2
            H = s[..., None, None] * H - 2 * (a * s)[..., None, None] * J[..., :, None] * J[..., None, :]
            J, h = s[..., None] * J, a
    return h, J, H


def _closed_form(x):
    """y = [sin(x0) x1^2, exp(x0 x1)]: values, Jacobian (N, 2, 2), Hessians (N, 2, 2, 2)."""
    x0, x1 = x[:, 0], x[:, 1]
    e = np.exp(x0 * x1)
    y = np.stack([np.sin(x0) * x1 ** 2, e], 1)
    J = np.stack([np.stack([np.cos(x0) * x1 ** 2, 2 * np.sin(x0) * x1], 1),
                  np.stack([x1 * e, x0 * e], 1)], 1)
    H0 = np.stack([np.stack([-np.sin(x0) * x1 ** 2, 2 * np.cos(x0) * x1], 1),
                   np.stack([2 * np.cos(x0) * x1, 2 * np.sin(x0)], 1)], 1)
    H1 = np.stack([np.stack([x1 ** 2 * e, e + x0 * x1 * e], 1),
                   np.stack([e + x0 * x1 * e, x0 ** 2 * e], 1)], 1)
    return y, J, np.stack([H0, H1], 1)


# ---------------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------------

def closed_form_page(torch, x_np, autodiff):
    """``dde.grad.jacobian``/``hessian`` of a known function (the network replaced by it)."""
    dde = make_dde(torch, autodiff=autodiff)

    def f(x):
        return torch.cat([torch.sin(x[:, 0:1]) * x[:, 1:2] ** 2, torch.exp(x[:, 0:1] * x[:, 1:2])], 1)

    x = torch.as_tensor(x_np).requires_grad_()
    y = f(x) if autodiff == "reverse" else (f(x), f)
    first = (lambda r: r) if autodiff == "reverse" else (lambda r: r[0])
    out = {"J": np.stack([np.stack([_np(first(dde.grad.jacobian(y, x, i=i, j=j)))[:, 0] for j in range(2)], 1)
                          for i in range(2)], 1),
           "H": np.stack([np.stack([np.stack([_np(first(dde.grad.hessian(y, x, component=c, i=i, j=j)))[:, 0]
                                              for j in range(2)], 1) for i in range(2)], 1) for c in range(2)], 1)}
    # the cache hands back the very same tensors for the same (ys, xs) pair
    out["cached"] = dde.grad.jacobian(y, x, i=1, j=0) is dde.grad.jacobian(y, x, i=1, j=0)
    h = dde.grad.hessian(y, x, component=1, i=0, j=1)
    out["hessian_cached"] = h is dde.grad.hessian(y, x, component=1, i=0, j=1)
    errors = []
    for call in (lambda: dde.grad.jacobian(y, x, i=2, j=0), lambda: dde.grad.jacobian(y, x, i=0, j=5),
                 lambda: dde.grad.jacobian(y, x),
                 lambda: dde.grad.jacobian(y, x, i=None if autodiff == "reverse" else 0,
                                           j=0 if autodiff == "reverse" else None)):
        try:
            call()
        except (ValueError, NotImplementedError) as e:
            errors.append(f"{type(e).__name__}: {e}")
    out["errors"] = errors
    dde.grad.clear()
    return out


def fnn_pinn_grad_page(torch, W, x_np, autodiff):
    """FNN([2, 5, 5, 2], "tanh"): all first and second derivatives through ``dde.grad``, then the
    parameter gradient of a loss on the Hessian (a third derivative)."""
    dde = make_dde(torch, autodiff=autodiff)
    net = dde.nn.FNN([2, 5, 5, 2], "tanh", "Glorot normal")
    _load(torch, net, W)
    x = torch.as_tensor(x_np).requires_grad_()
    y = net(x) if autodiff == "reverse" else (net(x), net)
    first = (lambda r: r) if autodiff == "reverse" else (lambda r: r[0])
    J = [[first(dde.grad.jacobian(y, x, i=i, j=j)) for j in range(2)] for i in range(2)]
    H = [[[first(dde.grad.hessian(y, x, component=c, i=i, j=j)) for j in range(2)] for i in range(2)]
         for c in range(2)]
    # a PINN-style loss on the derivatives: u_xx + u_yy of output 0 and u_x of output 1 * output 0
    y0 = y if autodiff == "reverse" else y[0]
    res = H[0][0][0] + H[0][1][1] + J[1][0] * y0[:, 0:1]
    loss = dde.losses.mean_squared_error(torch.zeros_like(res), res)
    loss.backward()
    dde.grad.clear()
    return {"J": np.stack([np.concatenate([_np(J[i][j]) for j in range(2)], 1) for i in range(2)], 1),
            "H": np.stack([np.stack([np.concatenate([_np(H[c][i][j]) for j in range(2)], 1) for i in range(2)], 1)
                           for c in range(2)], 1),
            "loss": loss.item(), "grads": {k: _np(p.grad) for k, p in net.named_parameters()}}


def _np_fnn_pinn_loss(W, x):
    _, J, H = _np_fnn(W, "", 3, x)
    y, _, _ = _np_fnn(W, "", 3, x)
    res = H[:, 0, 0, 0] + H[:, 0, 1, 1] + J[:, 1, 0] * y[:, 0]
    return np.mean(res ** 2)


def poisson_page(torch, W, optimizer, iterations=0, autodiff="reverse", loss_weights=None):
    """examples/pinn_forward/Poisson_Dirichlet_1d.py (shrunk: FNN [1, 8, 8, 1], 14 points)."""
    dde = make_dde(torch, autodiff=autodiff)
    model_module = deepxde_model(torch, dde)

    def pde(x, y):
        dy_xx = dde.grad.hessian(y, x)
        if autodiff == "forward":
            dy_xx = dy_xx[0]
        # Use torch.sin for backend pytorch
        return -dy_xx - np.pi ** 2 * torch.sin(np.pi * x)

    def func(x):
        return np.sin(np.pi * x)

    bc = model_module.DirichletBC(func)
    data = model_module.PDE(pde, bc, [np.array([[-1.0], [1.0]])], np.linspace(-1, 1, 12)[:, None])

    layer_size = [1] + [8] * 2 + [1]
    activation = "tanh"
    initializer = "Glorot uniform"
    net = dde.nn.FNN(layer_size, activation, initializer)
    _load(torch, net, W)

    model = model_module.Model(data, net)
    if optimizer == "adam":
        model.compile("adam", lr=0.01, loss_weights=loss_weights)
        history = model.train(iterations=iterations, display_every=5)
    else:
        model.compile("L-BFGS", loss_weights=loss_weights)
        history = model.train()
    x = np.linspace(-1, 1, 5)[:, None]
    residual = model.predict(x, operator=pde)[:, 0] if autodiff == "reverse" else None
    return {"history": np.array(history), "residual": residual,
            "y": model.predict(x)[:, 0], "lbfgs_iters": getattr(model, "lbfgs_iters", None),
            "outputs": (lambda o: (_np(o)[:, 0], o.requires_grad, net.training))(model.outputs(False, x)),
            "requires_grad": [p.requires_grad for p in net.parameters()],
            "W": {k: _np(p) for k, p in net.named_parameters()}}


def euler_beam_page(torch, W, iterations, autodiff="reverse", exact=False):
    """examples/pinn_forward/Euler_beam.py (FNN [1, 6, 6, 1]): a fourth derivative as the Hessian
    of the Hessian, a third as the Jacobian of the cached Hessian, Neumann and operator BCs."""
    dde = make_dde(torch, autodiff=autodiff)
    mm = deepxde_model(torch, dde)
    first = (lambda r: r) if autodiff == "reverse" else (lambda r: r[0])

    def ddy(x, y):
        return dde.grad.hessian(y, x)

    def dddy(x, y):
        return dde.grad.jacobian(ddy(x, y), x)

    def pde(x, y):
        dy_xx = ddy(x, y)
        dy_xxxx = dde.grad.hessian(dy_xx, x)
        return first(dy_xxxx) + 1

    def func(x):
        return -(x ** 4) / 24 + x ** 3 / 6 - x ** 2 / 4

    bc1 = mm.DirichletBC(lambda x: np.zeros_like(x))
    bc2 = mm.NeumannBC(lambda x: np.zeros_like(x))
    bc3 = mm.OperatorBC(lambda x, y, _: first(ddy(x, y)))
    bc4 = mm.OperatorBC(lambda x, y, _: first(dddy(x, y)))
    left, right = np.array([[0.0]]), np.array([[1.0]])
    if autodiff == "reverse":
        data = mm.PDE(pde, [bc1, bc2, bc3, bc4], [left, left, right, right], np.linspace(0, 1, 8)[:, None])
    else:  # DeepXDE's BCs get the output tensor, not the (output, network) pair forward mode needs
        data = mm.PDE(pde, [bc1], [left], np.linspace(0, 1, 8)[:, None])
    if exact:
        class Exact(dde.nn.NN):
            def forward(self, x):
                return func(x)

        net = Exact()
        net.w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))  # something for Adam to hold
    else:
        net = dde.nn.FNN([1] + [6] * 2 + [1], "tanh", "Glorot uniform")
        _load(torch, net, W)
    model = mm.Model(data, net)
    model.compile("adam", lr=0.005)
    history = np.array(model.train(iterations=iterations, display_every=iterations or 1))
    return {"history": history, "W": {k: _np(p) for k, p in net.named_parameters()}}


def _np_euler_beam_losses(W, h=1e-2):
    """The five losses, the derivatives above the second by fourth-order central differences of
    the exact second derivative (step h)."""
    def H(x):
        return _np_fnn(W, "", 3, np.asarray(x, float)[:, None])[2][:, 0, 0, 0]

    x = np.linspace(0, 1, 8)
    d4 = (-H(x + 2 * h) + 16 * H(x + h) - 30 * H(x) + 16 * H(x - h) - H(x - 2 * h)) / (12 * h ** 2)
    y0, J0, _ = _np_fnn(W, "", 3, np.array([[0.0]]))
    d3 = (-H([1 + 2 * h]) + 8 * H([1 + h]) - 8 * H([1 - h]) + H([1 - 2 * h])) / (12 * h)
    return np.array([np.mean((d4 + 1) ** 2), y0[0, 0] ** 2, J0[0, 0, 0] ** 2, H([1.0])[0] ** 2, d3[0] ** 2])


def inverse_diffusion_page(torch, iterations):
    """examples/pinn_inverse/diffusion_1d_inverse.py: the unknown diffusion coefficient ``C``
    (``dde.Variable(2.0)``, an external trainable variable) with the exact solution in place of
    the network, so only ``C`` learns (the true value is 1); PointSetBC observations."""
    dde = make_dde(torch)
    mm = deepxde_model(torch, dde)
    C = dde.bkd.Variable(2.0)

    def pde(x, y):
        dy_t = dde.grad.jacobian(y, x, i=0, j=1)
        dy_xx = dde.grad.hessian(y, x, i=0, j=0)
        # Backend pytorch
        return (
            dy_t
            - C * dy_xx
            + torch.exp(-x[:, 1:])
            * (torch.sin(np.pi * x[:, 0:1]) - np.pi ** 2 * torch.sin(np.pi * x[:, 0:1]))
        )

    def func(x):
        return np.sin(np.pi * x[:, 0:1]) * np.exp(-x[:, 1:])

    class Exact(dde.nn.NN):
        def forward(self, x):
            return torch.sin(np.pi * x[:, 0:1]) * torch.exp(-x[:, 1:])

    observe_x = np.vstack((np.linspace(-1, 1, num=4), np.full((4), 1))).T
    observe_y = mm.PointSetBC(observe_x, func(observe_x), component=0)
    pts = np.stack([np.linspace(-0.8, 0.9, 6), np.linspace(0.1, 0.9, 6)], 1)
    data = mm.PDE(pde, [observe_y], [observe_x], pts)
    model = mm.Model(data, Exact())
    model.compile("adam", lr=0.1, external_trainable_variables=C)
    values = []
    for _ in range(iterations):
        model._train_step(*data.train_next_batch())
        values.append(C.item())
    return {"C": values, "dtype": str(C.dtype).split(".")[-1], "grad_dtype": str(C.grad.dtype).split(".")[-1],
            "losses": model._outputs_losses(True, *data.train_next_batch())[1]}


def msffn_page(torch, seed):
    """MsFFN and STMsFFN (float32, as in the source: ``torch.empty`` + ``nn.init.normal_`` frozen
    Fourier weights in a ``ParameterList``): outputs, the Laplacian through ``dde.grad.hessian``
    and one Adam step on the PDE-style loss (the frozen weights must not move)."""
    dde = make_dde(torch)
    rng = np.random.default_rng(seed)
    torch.manual_seed(0)
    net = dde.nn.MsFFN([2, 6, 4, 1], "tanh", "Glorot normal", [1.0, 3.0])
    st = dde.nn.STMsFFN([2, 6, 4, 1], "tanh", "Glorot normal", [1.0], [1.0, 2.0])
    W = {"ms": _weights(rng, net), "st": _weights(rng, st)}
    _load(torch, net, W["ms"])
    _load(torch, st, W["st"])
    x_np = rng.uniform(-1, 1, (5, 2))
    out = {"trainable": (net.num_trainable_parameters(), st.num_trainable_parameters()),
           "frozen": [k for k, p in st.named_parameters() if not p.requires_grad]}
    for name, model in (("ms", net), ("st", st)):
        x = torch.as_tensor(x_np, dtype=torch.float32).requires_grad_()
        y = model(x)
        lap = dde.grad.hessian(y, x, i=0, j=0) + dde.grad.hessian(y, x, i=1, j=1)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        loss = (lap ** 2).mean()
        loss.backward()
        opt.step()
        dde.grad.clear()
        out[name] = (_np(y)[:, 0], _np(lap)[:, 0], {k: _np(p) for k, p in model.named_parameters()},
                     len(model.fourier_feature_weights))
    return out, W, x_np


def _np_msffn(w, x, st=False):
    x = np.asarray(x, np.float64)
    w = {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}

    def fc(v):
        return np.tanh(v @ w["linears.0.weight"].T + w["linears.0.bias"])

    def ff(v, b):
        p = v @ b
        return np.concatenate([np.cos(p), np.sin(p)], 1)

    if st:
        yx = [fc(ff(x[:, :-1], w["b.0"]))]
        yt = [fc(ff(x[:, -1:], w[f"b.{i}"])) for i in (1, 2)]
        y = np.concatenate([a * b for a in yx for b in yt], 1)
    else:
        y = np.concatenate([fc(ff(x, w["b.0"])), fc(ff(x, w["b.1"]))], 1)
    return (y @ w["_dense.weight"].T + w["_dense.bias"])[:, 0]


def checkpoint_page(torch, W, W_other, optimizer, path):
    """``Model.save``/``Model.restore`` (``torch.save`` of the network's and the optimizer's state
    dicts) in the middle of training: a restored model, built with other weights, continues as
    the uninterrupted one."""
    dde = make_dde(torch)
    mm = deepxde_model(torch, dde, {"maxcor": 100, "ftol": 0, "gtol": 1e-8, "maxiter": 3, "maxfun": None,
                                    "maxls": 50, "iter_per_step": 3, "fun_per_step": 4})

    def pde(x, y):
        return -dde.grad.hessian(y, x) - np.pi ** 2 * torch.sin(np.pi * x)

    def build(weights, decay=None):
        data = mm.PDE(pde, mm.DirichletBC(lambda x: np.sin(np.pi * x)), [np.array([[-1.0], [1.0]])],
                      np.linspace(-1, 1, 8)[:, None])
        net = dde.nn.FNN([1, 5, 5, 1], "tanh", "Glorot uniform")
        _load(torch, net, weights)
        model = mm.Model(data, net)
        if optimizer == "adam":
            model.compile("adam", lr=0.01, decay=decay)
        else:
            model.compile("L-BFGS")
        return model

    def steps(model, n):
        for _ in range(n):
            model._train_step(*model.data.train_next_batch())

    straight = build(W)
    steps(straight, 4)
    first = build(W)
    steps(first, 2)
    saved = first.save(str(path / "model"))
    second = build(W_other)
    second.restore(saved)
    steps(second, 2)
    lrs = []
    if optimizer == "adam":  # the "inverse time" decay (a LambdaLR stepped after each step)
        decayed = build(W, decay=("inverse time", 2, 0.5))
        for _ in range(3):
            steps(decayed, 1)
            lrs.append(decayed.opt.param_groups[0]["lr"])
    return ({k: _np(p) for k, p in straight.net.named_parameters()},
            {k: _np(p) for k, p in second.net.named_parameters()}, lrs)


def _np_poisson_losses(W, loss_weights=None):
    x = np.linspace(-1, 1, 12)[:, None]
    _, _, H = _np_fnn(W, "", 3, x)
    res = -H[:, 0, 0, 0] - np.pi ** 2 * np.sin(np.pi * x[:, 0])
    yb, _, _ = _np_fnn(W, "", 3, np.array([[-1.0], [1.0]]))
    losses = np.array([np.mean(res ** 2), np.mean((yb[:, 0] - np.sin(np.pi * np.array([-1.0, 1.0]))) ** 2)])
    return losses * (1 if loss_weights is None else np.asarray(loss_weights))


def residuals_page(torch, W):
    """The PDE residuals of Burgers.py, heat.py (with the exact solution standing in for the
    network) and diffusion_1d_exactBC.py (a hard constraint by ``apply_output_transform``)."""
    dde = make_dde(torch)
    x_np = np.stack([np.linspace(-0.9, 0.8, 7), np.linspace(0.05, 0.95, 7)], 1)

    # Burgers.py
    def pde_burgers(x, y):
        dy_x = dde.grad.jacobian(y, x, i=0, j=0)
        dy_t = dde.grad.jacobian(y, x, i=0, j=1)
        dy_xx = dde.grad.hessian(y, x, i=0, j=0)
        return dy_t + y * dy_x - 0.01 / np.pi * dy_xx

    net = dde.nn.FNN([2] + [6] * 2 + [1], "tanh", "Glorot normal")
    _load(torch, net, W)
    x = torch.as_tensor(x_np).requires_grad_()
    out = {"burgers": _np(pde_burgers(x, net(x)))[:, 0]}
    dde.grad.clear()

    # heat.py
    a = 0.4  # Thermal diffusivity
    L = 1  # Length of the bar
    n = 1  # Frequency of the sinusoidal initial conditions

    def pde_heat(x, y):
        """Expresses the PDE residual of the heat equation."""
        dy_t = dde.grad.jacobian(y, x, i=0, j=1)
        dy_xx = dde.grad.hessian(y, x, i=0, j=0)
        return dy_t - a * dy_xx

    class Exact(dde.nn.NN):
        def forward(self, x):
            return torch.exp(-(n**2 * np.pi**2 * a * x[:, 1:2]) / (L**2)) * torch.sin(n * np.pi * x[:, 0:1] / L)

    x = torch.as_tensor(x_np).requires_grad_()
    y = Exact()(x)
    out["heat"] = _np(pde_heat(x, y))[:, 0]
    out["heat_dy_t"] = _np(dde.grad.jacobian(y, x, i=0, j=1))[:, 0]
    dde.grad.clear()

    # diffusion_1d_exactBC.py
    def pde_diffusion(x, y):
        dy_t = dde.grad.jacobian(y, x, i=0, j=1)
        dy_xx = dde.grad.hessian(y, x, i=0, j=0)
        # Backend pytorch
        return (
            dy_t
            - dy_xx
            + torch.exp(-x[:, 1:])
            * (torch.sin(np.pi * x[:, 0:1]) - np.pi ** 2 * torch.sin(np.pi * x[:, 0:1]))
        )

    net = dde.nn.FNN([2] + [6] * 2 + [1], "tanh", "Glorot uniform")
    _load(torch, net, W)
    net.apply_output_transform(
        # Backend pytorch
        lambda x, y: x[:, 1:2] * (1 - x[:, 0:1] ** 2) * y + torch.sin(np.pi * x[:, 0:1])
    )
    x = torch.as_tensor(x_np).requires_grad_()
    out["diffusion"] = _np(pde_diffusion(x, net(x)))[:, 0]
    dde.grad.clear()
    x0 = torch.as_tensor(np.stack([x_np[:, 0], np.zeros(7)], 1))
    out["diffusion_t0"] = _np(net(x0))[:, 0]
    return out


def operators_page(torch, seed):
    """DeepONet, DeepONetCartesianProd, PODDeepONet, MIONetCartesianProd (three merger setups)
    and PODMIONet: outputs and the gradient of the bias ``b`` (added in place)."""
    dde = make_dde(torch)
    rng = np.random.default_rng(seed)
    nets = {
        "deeponet": dde.nn.DeepONet([3, 4, 4], [2, 4, 4], "tanh", "Glorot normal"),
        "cartesian": dde.nn.DeepONetCartesianProd([3, 4, 4], [2, 4, 4], {"branch": "relu", "trunk": "tanh"},
                                                   "Glorot normal"),
        "mionet": dde.nn.MIONetCartesianProd([3, 4], [2, 4], [2, 4, 4], "tanh", "Glorot normal",
                                             trunk_last_activation=True),
        "mionet_merger": dde.nn.MIONetCartesianProd(
            [3, 4], [2, 3], [2, 4, 4], {"branch1": "tanh", "branch2": "tanh", "trunk": "tanh", "merger": "tanh",
                                        "output merger": "tanh"}, "Glorot normal", merge_operation="cat",
            layer_sizes_merger=[7, 4], output_merge_operation="cat", layer_sizes_output_merger=[8, 3, 1]),
        "mionet_add": dde.nn.MIONetCartesianProd(
            [3, 4], [2, 4], [2, 4], {"branch1": "sin", "branch2": "silu", "trunk": "tanh",
                                     "output merger": "sigmoid"}, "Glorot normal", merge_operation="add",
            output_merge_operation="mul", layer_sizes_output_merger=[4, 1]),
    }
    for net in nets.values():
        net.b.data.fill_(0.25)
    W = {name: _weights(rng, net) for name, net in nets.items()}
    X = {"f1": rng.standard_normal((3, 3)), "f2": rng.standard_normal((3, 2)),
         "loc": rng.standard_normal((5, 2)), "loc_b": rng.standard_normal((3, 2))}
    t = {k: torch.as_tensor(v) for k, v in X.items()}
    inputs = {"deeponet": (t["f1"], t["loc_b"]), "cartesian": (t["f1"], t["loc"]),
              "mionet": (t["f1"], t["f2"], t["loc"]), "mionet_merger": (t["f1"], t["f2"], t["loc"]),
              "mionet_add": (t["f1"], t["f2"], t["loc"])}
    out = {}
    for name, net in nets.items():
        _load(torch, net, W[name])
        y = net(inputs[name])
        (y * y).sum().backward()
        out[name] = (_np(y), net.b.grad.item(), net.num_trainable_parameters())
    # POD variants (float32 basis, as in the source)
    pod = rng.standard_normal((5, 3))
    d32 = make_dde(torch, real="float32")
    pods = {"pod": d32.nn.PODDeepONet(pod, [3, 4, 3], "tanh", "Glorot normal"),
            "pod_trunk": d32.nn.PODDeepONet(pod, [3, 4, 5], "tanh", "Glorot normal", layer_sizes_trunk=[2, 4, 2]),
            "podmionet": d32.nn.PODMIONet(pod, [3, 4], [2, 4], {"branch1": "tanh", "branch2": "tanh",
                                          "trunk": "tanh", "merger": "tanh"}, "Glorot normal",
                                          layer_sizes_trunk=[2, 4], merge_operation="cat",
                                          layer_sizes_merger=[8, 7], trunk_last_activation=True)}
    W.update({name: _weights(rng, net) for name, net in pods.items()})
    f1, f2, loc = (torch.as_tensor(X[k], dtype=torch.float32) for k in ("f1", "f2", "loc"))
    for name, net in pods.items():
        _load(torch, net, W[name])
        y = net((f1, loc)) if name != "podmionet" else net((f1, f2, loc))
        out[name] = (_np(y), str(y.dtype).split(".")[-1])
    return out, W, X, pod


def zcs_page(torch, W, branch_np, trunk_np):
    """ZCS derivatives of a DeepONetCartesianProd (u: branch rows x trunk points) against the
    same derivatives by ``dde.grad.jacobian``/``hessian`` of ``u.T`` (one output per branch row),
    and the parameter gradients of the residual u_t - 0.1 u_xx + u u_x by both routes."""
    dde = make_dde(torch)
    zcs = deepxde_zcs(torch)
    net = dde.nn.DeepONetCartesianProd([3, 4, 4], [2, 4, 4], "tanh", "Glorot normal")
    _load(torch, net, W)
    inputs, zcs_parameters = zcs.process_inputs_zcs((branch_np, trunk_np))
    u = net(inputs)
    grad_u = zcs.LazyGrad(zcs_parameters, u)
    d = {o: grad_u.compute(o) for o in [(1, 0), (0, 1), (2, 0), (1, 1), (0, 2)]}
    res = d[(0, 1)] - 0.1 * d[(2, 0)] + u * d[(1, 0)]
    loss = (res ** 2).mean()
    loss.backward()
    out = {"u": _np(u), "d": {o: _np(v) for o, v in d.items()}, "loss": loss.item(),
           "grads": {k: _np(p.grad) for k, p in net.named_parameters()},
           "leaves_grad": [z.grad for z in zcs_parameters["leaves"]],
           "cached": sorted(tuple(int(i) for i in k) for k in grad_u.cached_omega_grads)}
    # the same residual through dde.grad, one output per branch row
    net.zero_grad()
    trunk = torch.as_tensor(trunk_np).requires_grad_()
    u = net((torch.as_tensor(branch_np), trunk))
    uT = u.T
    rows = []
    for b in range(u.shape[0]):
        u_x = dde.grad.jacobian(uT, trunk, i=b, j=0)
        u_t = dde.grad.jacobian(uT, trunk, i=b, j=1)
        u_xx = dde.grad.hessian(uT, trunk, component=b, i=0, j=0)
        rows.append(u_t - 0.1 * u_xx + uT[:, b : b + 1] * u_x)
    loss_ref = (torch.cat(rows, 1).T ** 2).mean()
    loss_ref.backward()
    dde.grad.clear()
    out["loss_ref"] = loss_ref.item()
    out["grads_ref"] = {k: _np(p.grad) for k, p in net.named_parameters()}
    return out


def backend_page(torch):
    """Every function of ``deepxde/backend/pytorch/tensor.py`` and the losses."""
    dde = make_dde(torch)
    bkd, losses = dde.bkd, dde.losses
    rng = np.random.default_rng(3)
    a_np = rng.standard_normal((3, 4))
    b_np = rng.uniform(0.5, 2.0, (4, 2))
    a, b = bkd.from_numpy(a_np), bkd.as_tensor(b_np)
    out = {
        "dtypes": sorted(k for k, v in bkd.data_type_dict().items() if isinstance(v, torch.dtype)),
        "is_tensor": (bkd.is_tensor(a), bkd.is_tensor(a_np)),
        "shape": bkd.shape(a), "size": bkd.size(a), "ndim": bkd.ndim(a),
        "transpose": bkd.to_numpy(bkd.transpose(a)), "transpose_axes": bkd.to_numpy(bkd.transpose(a[None], (1, 0, 2))),
        "reshape": bkd.to_numpy(bkd.reshape(a, (2, 6))),
        "as_tensor32": str(bkd.as_tensor(a, dtype=torch.float32).dtype).split(".")[-1],
        "as_tensor_same": bkd.as_tensor(a) is a,
        "concat": bkd.to_numpy(bkd.concat([a, a * 2], 0)), "stack": bkd.to_numpy(bkd.stack([a, a], 2)),
        "expand_dims": bkd.shape(bkd.expand_dims(a, 1)),
        "reverse": bkd.to_numpy(bkd.reverse(a, (1,))), "roll": bkd.to_numpy(bkd.roll(a, 2, 1)),
        "lgamma": bkd.to_numpy(bkd.lgamma(b)),
        "acts": {n: bkd.to_numpy(getattr(bkd, n)(a)) for n in ("elu", "relu", "selu", "sigmoid", "silu", "sin",
                                                               "cos", "exp", "square", "tanh")},
        "pow": bkd.to_numpy(bkd.pow(b, 1.5)),
        "mean": bkd.to_numpy(bkd.mean(a, 1, keepdims=True)), "reduce_mean": bkd.reduce_mean(a).item(),
        "sum": bkd.to_numpy(bkd.sum(a, 0)), "reduce_sum": bkd.reduce_sum(a).item(),
        "norm": bkd.to_numpy(bkd.norm(a, axis=1)), "norm_fro": bkd.norm(a).item(),
        "norm_1": bkd.to_numpy(bkd.norm(a, ord=1, axis=0, keepdims=True)),
        "zeros": bkd.to_numpy(bkd.zeros((2, 3), torch.float64)),
        "zeros_like": bkd.to_numpy(bkd.zeros_like(a)), "matmul": bkd.to_numpy(bkd.matmul(a, b)),
        "mse": losses.get("MSE")(a[:, :2], b[:2].T.repeat(2, 1)[:3]).item(),
        "l2rel": losses.get("mean l2 relative error")(a, a * 1.5 + 0.1).item(),
        "loss_list": [f.__name__ for f in losses.get(["mse", "mean squared error"])],
    }
    v = bkd.Variable(1.5)
    (v * v * v).backward()
    out["variable"] = (v.requires_grad, v.grad.item())
    # a sparse (COO) operator applied to dense columns, differentiated in its values
    indices = [(0, 0), (1, 2), (2, 1), (0, 3)]
    values = torch.as_tensor(np.array([1.0, -2.0, 0.5, 3.0]))
    sp = bkd.sparse_tensor(indices, values, (3, 4))
    prod = bkd.sparse_dense_matmul(sp, b)
    (prod ** 2).sum().backward()
    out["sparse"] = bkd.to_numpy(prod)
    out["sparse_grad"] = bkd.to_numpy(sp.grad.to_dense())
    return out


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------

def _x2(seed=0, n=6):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 2))


def _fnn_weights(sizes, seed, scale=0.6):
    rng = np.random.default_rng(seed)
    W = {}
    for k, (m, n) in enumerate(zip(sizes, sizes[1:])):
        W[f"linears.{k}.weight"] = rng.standard_normal((n, m)) * scale
        W[f"linears.{k}.bias"] = rng.standard_normal(n) * scale
    return W


@pytest.mark.parametrize("autodiff", ["reverse", "forward"])
def test_gradients_of_a_known_function(autodiff):
    x = _x2()
    out = closed_form_page(lucid, x, autodiff)
    _, J, H = _closed_form(x)
    np.testing.assert_allclose(out["J"], J, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["H"], H, rtol=1e-12, atol=1e-14)
    assert out["cached"] and out["hessian_cached"]
    last = ("NotImplementedError: Reverse-mode autodiff doesn't support computing a column." if autodiff == "reverse"
            else "NotImplementedError: Forward-mode autodiff doesn't support computing gradient.")
    assert out["errors"] == ["ValueError: i=2 is not valid.", "ValueError: j=5 is not valid.",
                             "ValueError: i and j cannot be both None.", last]


def test_gradients_of_a_known_function_torch_parity():
    torch = pytest.importorskip("torch")
    x = _x2()
    for autodiff in ("reverse", "forward"):
        r, t = closed_form_page(lucid, x, autodiff), closed_form_page(torch, x, autodiff)
        np.testing.assert_allclose(r["J"], t["J"], rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(r["H"], t["H"], rtol=1e-14, atol=1e-15)
        assert (r["cached"], r["hessian_cached"], r["errors"]) == (t["cached"], t["hessian_cached"], t["errors"])


@pytest.mark.parametrize("autodiff", ["reverse", "forward"])
def test_fnn_derivatives_and_third_order_parameter_gradient(autodiff):
    x, W = _x2(1), _fnn_weights([2, 5, 5, 2], 2)
    out = fnn_pinn_grad_page(lucid, W, x, autodiff)
    _, J, H = _np_fnn(W, "", 3, x)
    np.testing.assert_allclose(out["J"], J, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(out["H"], H, rtol=1e-12, atol=1e-13)
    assert out["loss"] == pytest.approx(_np_fnn_pinn_loss(W, x), rel=1e-12)
    # the loss's parameter gradient (third derivatives of the network) along two random
    # directions against float64 central differences of the NumPy loss
    rng = np.random.default_rng(5)
    for _ in range(2):
        D = {k: rng.standard_normal(v.shape) for k, v in W.items()}
        eps = 1e-6
        fd = (_np_fnn_pinn_loss({k: W[k] + eps * D[k] for k in W}, x)
              - _np_fnn_pinn_loss({k: W[k] - eps * D[k] for k in W}, x)) / (2 * eps)
        assert sum((out["grads"][k] * D[k]).sum() for k in W) == pytest.approx(fd, rel=1e-7, abs=1e-8)


def test_forward_and_reverse_mode_agree_on_parameter_gradients():
    x, W = _x2(1), _fnn_weights([2, 5, 5, 2], 2)
    r, f = fnn_pinn_grad_page(lucid, W, x, "reverse"), fnn_pinn_grad_page(lucid, W, x, "forward")
    for k in W:
        np.testing.assert_allclose(f["grads"][k], r["grads"][k], rtol=1e-11, atol=1e-13)


def test_fnn_derivatives_torch_parity():
    torch = pytest.importorskip("torch")
    x, W = _x2(1), _fnn_weights([2, 5, 5, 2], 2)
    for autodiff in ("reverse", "forward"):
        r, t = fnn_pinn_grad_page(lucid, W, x, autodiff), fnn_pinn_grad_page(torch, W, x, autodiff)
        np.testing.assert_allclose(r["H"], t["H"], rtol=1e-12, atol=1e-14)
        assert r["loss"] == pytest.approx(t["loss"], rel=1e-12)
        for k in W:
            np.testing.assert_allclose(r["grads"][k], t["grads"][k], rtol=1e-10, atol=1e-13)


def test_poisson_dirichlet_1d_adam_reduces_the_pinn_loss():
    W = _fnn_weights([1, 8, 8, 1], 1, 0.5)
    out = poisson_page(lucid, W, "adam", iterations=30)
    hist = out["history"]
    np.testing.assert_allclose(hist[0], _np_poisson_losses(W), rtol=1e-12)  # [PDE loss, BC loss]
    assert hist.shape == (7, 2)  # the start, then every 5th of 30 steps
    assert hist[-1].sum() < 0.35 * hist[0].sum()  # 46.0 -> 11.7 in 30 steps
    assert all(a > b for a, b in zip(hist.sum(1), hist.sum(1)[1:]))
    # the final weights: the reported losses are those of the trained weights
    np.testing.assert_allclose(hist[-1], _np_poisson_losses(out["W"]), rtol=1e-10)
    # predict(operator=pde) is the residual of the trained network
    x = np.linspace(-1, 1, 5)
    _, _, H = _np_fnn(out["W"], "", 3, x[:, None])
    np.testing.assert_allclose(out["residual"], -H[:, 0, 0, 0] - np.pi ** 2 * np.sin(np.pi * x), rtol=1e-10, atol=1e-12)
    assert out["requires_grad"] == [True] * 6  # restored after _outputs_losses' requires_grad_(False)
    # Model.outputs: inputs made leaves requiring grad under no_grad, the network in eval mode
    y, requires_grad, training = out["outputs"]
    np.testing.assert_allclose(y, _np_fnn(out["W"], "", 3, x[:, None])[0][:, 0], rtol=1e-12)
    np.testing.assert_array_equal(y, out["y"])
    assert requires_grad and not training


def test_poisson_loss_weights_scale_the_stacked_losses_in_place():
    W = _fnn_weights([1, 8, 8, 1], 1, 0.5)
    out = poisson_page(lucid, W, "adam", iterations=0, loss_weights=[0.5, 4.0])
    np.testing.assert_allclose(out["history"][0], _np_poisson_losses(W, [0.5, 4.0]), rtol=1e-12)


def test_poisson_dirichlet_1d_forward_mode_trains_as_reverse_mode():
    W = _fnn_weights([1, 8, 8, 1], 1, 0.5)
    r, f = poisson_page(lucid, W, "adam", 10), poisson_page(lucid, W, "adam", 10, autodiff="forward")
    np.testing.assert_allclose(f["history"], r["history"], rtol=1e-9)
    assert f["history"][-1].sum() < 0.85 * f["history"][0].sum()


def test_poisson_dirichlet_1d_lbfgs():
    W = _fnn_weights([1, 8, 8, 1], 1, 0.5)
    out = poisson_page(lucid, W, "L-BFGS")
    hist = out["history"]
    # Model._train_pytorch_lbfgs reads opt.state_dict()["state"][0]["n_iter"] after each step
    assert out["lbfgs_iters"][-1] >= 6 and out["lbfgs_iters"] == sorted(out["lbfgs_iters"])
    assert hist[-1].sum() < 0.3 * hist[0].sum()
    np.testing.assert_allclose(hist[-1], _np_poisson_losses(out["W"]), rtol=1e-10)


def test_poisson_torch_parity():
    torch = pytest.importorskip("torch")
    W = _fnn_weights([1, 8, 8, 1], 1, 0.5)
    for args in [("adam", 30), ("L-BFGS",)]:
        r, t = poisson_page(lucid, W, *args), poisson_page(torch, W, *args)
        np.testing.assert_allclose(r["history"], t["history"], rtol=1e-8)
        assert r["lbfgs_iters"] == t["lbfgs_iters"]
        for k in W:
            np.testing.assert_allclose(r["W"][k], t["W"][k], rtol=1e-8, atol=1e-10)
    r = poisson_page(lucid, W, "adam", 10, autodiff="forward")
    t = poisson_page(torch, W, "adam", 10, autodiff="forward")
    np.testing.assert_allclose(r["history"], t["history"], rtol=1e-9)


def _residual_references(W, x):
    y, J, H = _np_fnn(W, "", 3, x)
    burgers = J[:, 0, 1] + y[:, 0] * J[:, 0, 0] - 0.01 / np.pi * H[:, 0, 0, 0]
    X, T = x[:, 0], x[:, 1]
    N, Nx, Nt, Nxx = y[:, 0], J[:, 0, 0], J[:, 0, 1], H[:, 0, 0, 0]
    y_t = (1 - X ** 2) * N + T * (1 - X ** 2) * Nt
    y_xx = T * (-2 * N - 4 * X * Nx + (1 - X ** 2) * Nxx) - np.pi ** 2 * np.sin(np.pi * X)
    diffusion = y_t - y_xx + np.exp(-T) * (np.sin(np.pi * X) - np.pi ** 2 * np.sin(np.pi * X))
    return burgers, diffusion


def test_burgers_heat_and_hard_constraint_residuals():
    W = _fnn_weights([2, 6, 6, 1], 4)
    out = residuals_page(lucid, W)
    x = np.stack([np.linspace(-0.9, 0.8, 7), np.linspace(0.05, 0.95, 7)], 1)
    burgers, diffusion = _residual_references(W, x)
    np.testing.assert_allclose(out["burgers"], burgers, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(out["diffusion"], diffusion, rtol=1e-11, atol=1e-12)
    # the exact heat solution has a zero residual; its time derivative is the closed form
    np.testing.assert_allclose(out["heat"], 0.0, atol=1e-12)
    np.testing.assert_allclose(out["heat_dy_t"], -0.4 * np.pi ** 2 * np.exp(-0.4 * np.pi ** 2 * x[:, 1])
                               * np.sin(np.pi * x[:, 0]), rtol=1e-12)
    # the output transform makes the initial condition exact
    np.testing.assert_allclose(out["diffusion_t0"], np.sin(np.pi * x[:, 0]), rtol=1e-14, atol=1e-15)


def test_residuals_torch_parity():
    torch = pytest.importorskip("torch")
    W = _fnn_weights([2, 6, 6, 1], 4)
    r, t = residuals_page(lucid, W), residuals_page(torch, W)
    for k in r:
        np.testing.assert_allclose(r[k], t[k], rtol=1e-12, atol=1e-13)


_ACT = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0), "sin": np.sin, "silu": lambda v: v / (1 + np.exp(-v)),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)), None: lambda v: v}


def _np_mlp(W, prefix, x, act="tanh", last=None):
    n = len([k for k in W if k.startswith(prefix + "linears.") and k.endswith(".weight")])
    for k in range(n):
        x = x @ W[f"{prefix}linears.{k}.weight"].T + W[f"{prefix}linears.{k}.bias"]
        x = _ACT[act if k < n - 1 else last](x)
    return x


def _np_operators(W, X, pod):
    f1, f2, loc, loc_b = X["f1"], X["f2"], X["loc"], X["loc_b"]
    w = W["deeponet"]
    ref = {"deeponet": (_np_mlp(w, "branch.", f1) * _np_mlp(w, "trunk.", loc_b, last="tanh")).sum(1)[:, None] + w["b"]}
    w = W["cartesian"]
    ref["cartesian"] = _np_mlp(w, "branch.", f1, "relu") @ _np_mlp(w, "trunk.", loc, last="tanh").T + w["b"]
    w = W["mionet"]
    yf = _np_mlp(w, "branch1.", f1) * _np_mlp(w, "branch2.", f2)
    ref["mionet"] = yf @ _np_mlp(w, "trunk.", loc, last="tanh").T + w["b"]
    w = W["mionet_merger"]
    yf = _np_mlp(w, "merger.", np.concatenate([_np_mlp(w, "branch1.", f1), _np_mlp(w, "branch2.", f2)], 1))
    yl = _np_mlp(w, "trunk.", loc)
    cat = np.concatenate([np.repeat(yf[:, None], len(loc), 1), np.repeat(yl[None], len(f1), 0)], 2)
    ref["mionet_merger"] = _np_mlp(w, "output_merger.", cat.reshape(-1, 8)).reshape(len(f1), len(loc)) + w["b"]
    w = W["mionet_add"]
    yf = _np_mlp(w, "branch1.", f1, "sin") + _np_mlp(w, "branch2.", f2, "silu")
    prod = yf[:, None, :] * _np_mlp(w, "trunk.", loc)[None]
    ref["mionet_add"] = _np_mlp(w, "output_merger.", prod.reshape(-1, 4), "sigmoid").reshape(3, 5) + w["b"]
    pod32 = pod.astype(np.float32).astype(np.float64)
    w = W["pod"]
    ref["pod"] = _np_mlp(w, "branch.", f1) @ pod32.T
    w = W["pod_trunk"]
    basis = np.concatenate([pod32, _np_mlp(w, "trunk.", loc, last="tanh")], 1)
    ref["pod_trunk"] = _np_mlp(w, "branch.", f1) @ basis.T + w["b"]
    w = W["podmionet"]
    yf = _np_mlp(w, "merger.", np.concatenate([_np_mlp(w, "branch1.", f1), _np_mlp(w, "branch2.", f2)], 1))
    basis = np.concatenate([pod32, np.tanh(_np_mlp(w, "trunk.", loc))], 1)
    ref["podmionet"] = yf @ basis.T + w["b"]
    return ref


def test_deeponet_and_mionet_outputs_and_in_place_bias_gradient():
    out, W, X, pod = operators_page(lucid, 0)
    ref = _np_operators(W, X, pod)
    # the float32 bias b is rounded on the way in, so the float64 nets agree to float32's precision
    for name in ("deeponet", "cartesian", "mionet", "mionet_merger", "mionet_add"):
        y, b_grad, n_params = out[name]
        np.testing.assert_allclose(y, ref[name], rtol=1e-6, atol=1e-6)
        assert b_grad == pytest.approx(2 * y.sum(), rel=1e-6)  # d(sum y^2)/db through x += self.b
        assert n_params == sum(v.size for v in W[name].values())
    assert out["deeponet"][0].shape == (3, 1) and out["cartesian"][0].shape == (3, 5)
    for name in ("pod", "pod_trunk", "podmionet"):
        y, dtype = out[name]
        assert dtype == "float32"
        w32 = {k: v.astype(np.float32).astype(np.float64) for k, v in W[name].items()}
        np.testing.assert_allclose(y, _np_operators({**W, name: w32}, {k: v.astype(np.float32).astype(np.float64)
                                                                        for k, v in X.items()}, pod)[name],
                                   rtol=2e-5, atol=2e-5)


def test_operators_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = operators_page(lucid, 0)[0], operators_page(torch, 0)[0]
    for name in r:
        np.testing.assert_allclose(r[name][0], t[name][0], rtol=1e-6, atol=1e-6)
        assert r[name][1:] == pytest.approx(t[name][1:], rel=1e-6) if name.startswith(("deep", "cart", "mio")) \
            else r[name][1] == t[name][1]


def nn_errors_page(torch):
    """The networks' own checks, and the initializers' draws."""
    dde = make_dde(torch)
    msgs = []
    for build in (lambda: dde.nn.FNN([2, 3, 1], ["tanh"], "Glorot normal"),
                  lambda: dde.nn.PFNN([2], "tanh", "Glorot normal"),
                  lambda: dde.nn.PFNN([[2], 3, 1], "tanh", "Glorot normal"),
                  lambda: dde.nn.PFNN([2, 3, [1]], "tanh", "Glorot normal"),
                  lambda: dde.nn.PFNN([2, [3, 3, 3], 2], "tanh", "Glorot normal"),
                  lambda: dde.nn.PFNN([2, [3, 3], 4, 2], "tanh", "Glorot normal"),
                  lambda: dde.nn.FNN([2, 3, 1], "tanh", "Glorot sideways"),
                  lambda: dde.nn.FNN([2, 3, 1], "swoosh", "Glorot normal")):
        try:
            build()
        except (ValueError, KeyError, TypeError) as e:
            msgs.append(f"{type(e).__name__}: {e}")
    net = dde.nn.DeepONet([3, 4, 4], [2, 4, 5], "tanh", "Glorot normal")
    try:
        net((torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64)))
    except AssertionError as e:
        msgs.append(f"AssertionError: {e}")
    net = dde.nn.MIONetCartesianProd([3, 4], [2, 5], [2, 4], "tanh", "Glorot normal")
    try:
        net((torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64),
             torch.ones(4, 2, dtype=torch.float64)))
    except AssertionError as e:
        msgs.append(f"AssertionError: {e}")
    return msgs


def test_network_construction_errors():
    assert nn_errors_page(lucid) == [
        "ValueError: Total number of activation functions do not match with sum of hidden layers and output layer!",
        "ValueError: must specify input and output sizes",
        "ValueError: input size must be integer",
        "ValueError: output size must be integer",
        "ValueError: number of sub-layers should equal number of network outputs",
        "ValueError: cannot rejoin parallel subnetworks after splitting",
        "KeyError: 'Glorot sideways'",
        "KeyError: 'swoosh'",
        "AssertionError: Output sizes of branch net and trunk net do not match.",
        "AssertionError: Output sizes of branch1 net and branch2 net do not match.",
    ]


def test_network_construction_errors_torch_parity():
    torch = pytest.importorskip("torch")
    assert nn_errors_page(lucid) == nn_errors_page(torch)


def pfnn_page(torch, seed):
    """PFNN: a shared layer, parallel sub-networks, one output each; and FNN with a list of
    activations and a feature transform, in float32."""
    dde = make_dde(torch)
    rng = np.random.default_rng(seed)
    net = dde.nn.PFNN([2, 4, [3, 2], [2, 3], 2], "tanh", "He normal")
    W = _weights(rng, net)
    _load(torch, net, W)
    x = rng.standard_normal((5, 2))
    y = net(torch.as_tensor(x))
    d32 = make_dde(torch, real="float32")
    fnn = d32.nn.FNN([3, 4, 4, 2], ["relu", "sin", None], "He uniform")
    W2 = _weights(rng, fnn)
    _load(torch, fnn, W2)
    fnn.apply_feature_transform(lambda x: torch.cat([x, torch.sin(x[:, :1])], 1))
    z = fnn(torch.as_tensor(x, dtype=torch.float32))
    return _np(y), W, x, _np(z), W2, [type(m).__name__ for m in net.layers]


def test_pfnn_and_fnn_activation_lists():
    y, W, x, z, W2, kinds = pfnn_page(lucid, 3)
    h = np.tanh(x @ W["layers.0.weight"].T + W["layers.0.bias"])
    hs = [np.tanh(h @ W[f"layers.1.{j}.weight"].T + W[f"layers.1.{j}.bias"]) for j in range(2)]
    hs = [np.tanh(hj @ W[f"layers.2.{j}.weight"].T + W[f"layers.2.{j}.bias"]) for j, hj in enumerate(hs)]
    ref = np.concatenate([hj @ W[f"layers.3.{j}.weight"].T + W[f"layers.3.{j}.bias"] for j, hj in enumerate(hs)], 1)
    np.testing.assert_allclose(y, ref, rtol=1e-12)
    assert kinds == ["Linear", "ModuleList", "ModuleList", "ModuleList"]
    w32 = {k: v.astype(np.float32).astype(np.float64) for k, v in W2.items()}
    f = np.concatenate([x, np.sin(x[:, :1])], 1).astype(np.float32).astype(np.float64)
    f = np.maximum(f @ w32["linears.0.weight"].T + w32["linears.0.bias"], 0)
    f = np.sin(f @ w32["linears.1.weight"].T + w32["linears.1.bias"])
    np.testing.assert_allclose(z, f @ w32["linears.2.weight"].T + w32["linears.2.bias"], rtol=2e-5, atol=2e-6)


def test_pfnn_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = pfnn_page(lucid, 3), pfnn_page(torch, 3)
    np.testing.assert_allclose(r[0], t[0], rtol=1e-13)
    np.testing.assert_allclose(r[3], t[3], rtol=1e-5, atol=1e-6)
    assert r[5] == t[5]


def test_initializers_draw_in_their_ranges():
    dde = make_dde(lucid)
    lucid.manual_seed(0)
    net = dde.nn.FNN([20, 30, 10], "tanh", "Glorot uniform")
    for lin in net.linears:
        w = _np(lin.weight)
        bound = math.sqrt(6 / sum(w.shape))
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
        assert not _np(lin.bias).any()  # initializer_zero
        assert lin.weight.dtype == lucid.float64
    net = dde.nn.FNN([200, 300, 1], "relu", "He normal")
    w = _np(net.linears[0].weight)
    assert np.std(w) == pytest.approx(math.sqrt(2 / 200), rel=0.03)  # fan_in, 60 000 draws


def test_zcs_derivatives_match_dde_grad_and_numpy():
    rng = np.random.default_rng(6)
    dde = make_dde(lucid)
    W = _weights(rng, dde.nn.DeepONetCartesianProd([3, 4, 4], [2, 4, 4], "tanh", "Glorot normal"))
    branch, trunk = rng.standard_normal((3, 3)), rng.standard_normal((5, 2))
    out = zcs_page(lucid, W, branch, trunk)
    B = _np_mlp(W, "branch.", branch)
    T, JT, HT = _np_fnn(W, "trunk.", 2, trunk, last_act=True)
    b = W["b"].astype(np.float32)  # a float32 Parameter
    np.testing.assert_allclose(out["u"], B @ T.T + b, rtol=1e-12, atol=1e-6)
    for o, (i, j) in {(1, 0): (0, None), (0, 1): (1, None), (2, 0): (0, 0), (1, 1): (0, 1), (0, 2): (1, 1)}.items():
        ref = B @ (JT[:, :, i] if j is None else HT[:, :, i, j]).T
        np.testing.assert_allclose(out["d"][o], ref, rtol=1e-11, atol=1e-12)
    assert out["cached"] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]
    assert out["loss"] == pytest.approx(out["loss_ref"], rel=1e-12)
    for k in W:
        np.testing.assert_allclose(out["grads"][k], out["grads_ref"][k], rtol=1e-10, atol=1e-13)
    # the ZCS scalars are leaves of the graph: the loss reaches them too (u depends on x + z)
    assert all(g is not None and g.shape == () for g in out["leaves_grad"])


def test_zcs_torch_parity():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    W = _weights(rng, make_dde(lucid).nn.DeepONetCartesianProd([3, 4, 4], [2, 4, 4], "tanh", "Glorot normal"))
    branch, trunk = rng.standard_normal((3, 3)), rng.standard_normal((5, 2))
    r, t = zcs_page(lucid, W, branch, trunk), zcs_page(torch, W, branch, trunk)
    for o in r["d"]:
        np.testing.assert_allclose(r["d"][o], t["d"][o], rtol=1e-12, atol=1e-13)
    for k in W:
        np.testing.assert_allclose(r["grads"][k], t["grads"][k], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose([g.item() for g in r["leaves_grad"]], [g.item() for g in t["leaves_grad"]], rtol=1e-10)


def _np_backend_reference():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (4, 2))
    from math import lgamma
    sig = 1 / (1 + np.exp(-a))
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return a, b, {
        "transpose": a.T, "transpose_axes": a[None].transpose(1, 0, 2), "reshape": a.reshape(2, 6),
        "concat": np.concatenate([a, 2 * a]), "stack": np.stack([a, a], 2), "reverse": a[:, ::-1],
        "roll": np.roll(a, 2, 1), "lgamma": np.vectorize(lgamma)(b), "pow": b ** 1.5,
        "acts": {"elu": np.where(a > 0, a, np.expm1(a)), "relu": np.maximum(a, 0),
                 "selu": scale * np.where(a > 0, a, alpha * np.expm1(a)), "sigmoid": sig, "silu": a * sig,
                 "sin": np.sin(a), "cos": np.cos(a), "exp": np.exp(a), "square": a ** 2, "tanh": np.tanh(a)},
        "mean": a.mean(1, keepdims=True), "reduce_mean": a.mean(), "sum": a.sum(0), "reduce_sum": a.sum(),
        "norm": np.linalg.norm(a, axis=1), "norm_fro": np.linalg.norm(a),
        "norm_1": np.abs(a).sum(0, keepdims=True), "zeros": np.zeros((2, 3)), "zeros_like": np.zeros((3, 4)),
        "matmul": a @ b, "mse": np.mean((a[:, :2] - np.tile(b[:2].T, (2, 1))[:3]) ** 2),
        "l2rel": np.mean(np.linalg.norm(-0.5 * a - 0.1, axis=1) / np.linalg.norm(a, axis=1)),
    }


def test_backend_tensor_functions_and_losses():
    out = backend_page(lucid)
    a, b, ref = _np_backend_reference()
    for k, v in ref.items():
        if k == "acts":
            for n, r in v.items():
                np.testing.assert_allclose(out["acts"][n], r, rtol=1e-12, atol=1e-15, err_msg=n)
        else:
            np.testing.assert_allclose(out[k], v, rtol=1e-12, atol=1e-15, err_msg=k)
    assert out["dtypes"] == ["bool", "float16", "float32", "float64", "int16", "int32", "int64", "int8", "uint8"]
    assert out["is_tensor"] == (True, False) and out["as_tensor_same"] and out["as_tensor32"] == "float32"
    assert (out["shape"], out["size"], out["ndim"], out["expand_dims"]) == ([3, 4], 12, 2, [3, 1, 4])
    assert out["loss_list"] == ["mean_squared_error", "mean_squared_error"]
    assert out["variable"] == (True, 6.75)  # d(v^3)/dv at 1.5
    S = np.zeros((3, 4))
    S[0, 0], S[1, 2], S[2, 1], S[0, 3] = 1.0, -2.0, 0.5, 3.0
    np.testing.assert_allclose(out["sparse"], S @ b, rtol=1e-14)
    # d sum((S b)^2) / dS = 2 (S b) b^T, kept on S's sparsity pattern
    np.testing.assert_allclose(out["sparse_grad"], np.where(S != 0, 2 * (S @ b) @ b.T, 0.0), rtol=1e-13)


def test_backend_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = backend_page(lucid), backend_page(torch)
    assert r.keys() == t.keys()
    for k in r:
        if k == "acts":
            for n in r[k]:
                np.testing.assert_allclose(r[k][n], t[k][n], rtol=1e-13, atol=1e-15, err_msg=n)
        elif isinstance(r[k], np.ndarray):
            np.testing.assert_allclose(r[k], t[k], rtol=1e-13, atol=1e-15, err_msg=k)
        else:
            assert r[k] == pytest.approx(t[k], rel=1e-13) if isinstance(r[k], float) else r[k] == t[k], k


def test_euler_beam_fourth_derivative_and_operator_bcs():
    W = _fnn_weights([1, 6, 6, 1], 7, 0.8)
    out = euler_beam_page(lucid, W, 0)
    np.testing.assert_allclose(out["history"][0], _np_euler_beam_losses(W), rtol=1e-6, atol=1e-10)
    # the exact solution satisfies the PDE and the four BCs (polynomial: exact in float64)
    ex = euler_beam_page(lucid, None, 0, exact=True)
    np.testing.assert_allclose(ex["history"][0], 0.0, atol=1e-28)


@pytest.mark.parametrize("autodiff", ["reverse", "forward"])
def test_euler_beam_training_through_fifth_order_derivatives(autodiff):
    W = _fnn_weights([1, 6, 6, 1], 7, 0.8)
    out = euler_beam_page(lucid, W, 12, autodiff=autodiff)
    h = out["history"]
    assert h[-1].sum() < 0.6 * h[0].sum()
    ref = _np_euler_beam_losses(out["W"])
    np.testing.assert_allclose(h[-1], ref if autodiff == "reverse" else ref[:2], rtol=1e-6, atol=1e-10)


def test_euler_beam_torch_parity():
    torch = pytest.importorskip("torch")
    W = _fnn_weights([1, 6, 6, 1], 7, 0.8)
    for autodiff in ("reverse", "forward"):
        r, t = euler_beam_page(lucid, W, 12, autodiff), euler_beam_page(torch, W, 12, autodiff)
        np.testing.assert_allclose(r["history"], t["history"], rtol=1e-9, atol=1e-15)
        for k in W:
            np.testing.assert_allclose(r["W"][k], t["W"][k], rtol=1e-9, atol=1e-12)


def test_inverse_diffusion_learns_the_coefficient():
    out = inverse_diffusion_page(lucid, 6)
    assert out["dtype"] == "float32" and out["grad_dtype"] == "float32"  # torch.tensor(2.0, requires_grad=True)
    # residual = (C - 1) pi^2 u on the exact u, so dL/dC = 2 (C - 1) pi^4 mean(u^2): Adam by hand
    x = np.stack([np.linspace(-0.8, 0.9, 6), np.linspace(0.1, 0.9, 6)], 1)
    u2 = np.mean((np.sin(np.pi * x[:, 0]) * np.exp(-x[:, 1])) ** 2)
    c, m, v, ref = 2.0, 0.0, 0.0, []
    for t in range(1, 7):
        g = 2 * (c - 1) * np.pi ** 4 * u2
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        c -= 0.1 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        ref.append(c)
    np.testing.assert_allclose(out["C"], ref, rtol=1e-6)
    assert out["C"][-1] < 1.5
    # the PDE loss at the last C, the observations exact
    np.testing.assert_allclose(out["losses"], [(ref[-1] - 1) ** 2 * np.pi ** 4 * u2, 0.0], rtol=1e-5, atol=1e-14)


def test_inverse_diffusion_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = inverse_diffusion_page(lucid, 6), inverse_diffusion_page(torch, 6)
    np.testing.assert_allclose(r["C"], t["C"], rtol=1e-6)
    assert (r["dtype"], r["grad_dtype"]) == (t["dtype"], t["grad_dtype"])
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-5, atol=1e-14)


def test_msffn_fourier_features_laplacian_and_frozen_weights():
    out, W, x = msffn_page(lucid, 8)
    assert out["trainable"] == (37, 37) and out["frozen"] == ["b.0", "b.1", "b.2"]
    h = 1e-3
    for name, st in (("ms", False), ("st", True)):
        y, lap, after, n_ff = out[name]
        assert n_ff == (2 if name == "ms" else 3)
        np.testing.assert_allclose(y, _np_msffn(W[name], x, st), rtol=2e-5, atol=2e-6)
        ref = sum((_np_msffn(W[name], x + h * e, st) - 2 * _np_msffn(W[name], x, st)
                   + _np_msffn(W[name], x - h * e, st)) / h ** 2 for e in np.eye(2))
        np.testing.assert_allclose(lap, ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())
        for k, v in after.items():
            # Adam moved every trainable weight but the output bias (the Laplacian does not
            # depend on it: no gradient), none of the frozen Fourier weights
            moved = np.abs(v - W[name][k].astype(np.float32)).max()
            assert (moved == 0) if k.startswith("b.") or k == "_dense.bias" else (moved > 1e-3), k


def test_msffn_torch_parity():
    torch = pytest.importorskip("torch")
    (r, _, _), (t, _, _) = msffn_page(lucid, 8), msffn_page(torch, 8)
    assert (r["trainable"], r["frozen"]) == (t["trainable"], t["frozen"])
    for name in ("ms", "st"):
        np.testing.assert_allclose(r[name][0], t[name][0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r[name][1], t[name][1], rtol=1e-4, atol=1e-4)
        for k in r[name][2]:
            np.testing.assert_allclose(r[name][2][k], t[name][2][k], rtol=1e-5, atol=1e-6)


def relu_pinn_page(torch, W, x_np):
    """A ReLU network (``activations.get("relu")``) in the Poisson residual: its Hessian w.r.t.
    the input is zero; the first derivative is the masked weight product."""
    dde = make_dde(torch)
    net = dde.nn.FNN([1, 4, 4, 1], "relu", "He uniform")
    _load(torch, net, W)
    x = torch.as_tensor(x_np).requires_grad_()
    y = net(x)
    dy_x = dde.grad.jacobian(y, x)
    dy_xx = dde.grad.hessian(y, x)
    res = -dy_xx - np.pi ** 2 * torch.sin(np.pi * x) + dy_x * y
    loss = (res ** 2).mean()
    loss.backward()
    dde.grad.clear()
    return _np(dy_x)[:, 0], _np(dy_xx)[:, 0], loss.item(), {k: None if p.grad is None else _np(p.grad)
                                                            for k, p in net.named_parameters()}


def _np_relu_net(W, x):
    """Values and input derivatives (forward-propagated) of the ReLU FNN."""
    h, d = x, np.ones_like(x)
    for k in range(3):
        h, d = h @ W[f"linears.{k}.weight"].T + W[f"linears.{k}.bias"], d @ W[f"linears.{k}.weight"].T
        if k < 2:
            h, d = np.maximum(h, 0), d * (h > 0)
    return h[:, 0], d[:, 0]


def test_relu_network_hessian_is_zero_not_an_error():
    # Fixed on the way: the second derivative of a ReLU net with trainable weights raised
    # "one of the differentiated Tensors ... is not reachable" (PyTorch: zeros).
    W, x = _fnn_weights([1, 4, 4, 1], 9), np.linspace(-1, 1, 7)[:, None] + 0.013
    dy_x, dy_xx, loss, grads = relu_pinn_page(lucid, W, x)
    h = 1e-6
    y, d = _np_relu_net(W, x)
    np.testing.assert_allclose(dy_x, d, rtol=1e-13)
    np.testing.assert_allclose(dy_x, (_np_relu_net(W, x + h)[0] - _np_relu_net(W, x - h)[0]) / (2 * h), rtol=1e-7)
    assert not dy_xx.any()
    assert loss == pytest.approx(np.mean((-np.pi ** 2 * np.sin(np.pi * x[:, 0]) + dy_x * y) ** 2), rel=1e-12)
    # the loss reaches every weight through y and dy_x; d loss / d W by central differences
    eps, k = 1e-6, "linears.1.weight"
    D = np.random.default_rng(1).standard_normal(W[k].shape)

    def L(Wk):
        Wp = {**W, k: Wk}
        yy, dd = _np_relu_net(Wp, x)
        return np.mean((-np.pi ** 2 * np.sin(np.pi * x[:, 0]) + dd * yy) ** 2)

    fd = (L(W[k] + eps * D) - L(W[k] - eps * D)) / (2 * eps)
    assert (grads[k] * D).sum() == pytest.approx(fd, rel=1e-7)


def test_relu_network_hessian_torch_parity():
    torch = pytest.importorskip("torch")
    W, x = _fnn_weights([1, 4, 4, 1], 9), np.linspace(-1, 1, 7)[:, None] + 0.013
    r, t = relu_pinn_page(lucid, W, x), relu_pinn_page(torch, W, x)
    np.testing.assert_allclose(r[0], t[0], rtol=1e-13)
    np.testing.assert_allclose(r[1], t[1])
    assert r[2] == pytest.approx(t[2], rel=1e-12)
    for k in W:
        np.testing.assert_allclose(r[3][k], t[3][k], rtol=1e-10, atol=1e-13)


def _masked_second_derivatives(torch):
    x = torch.tensor([[0.5, -1.0], [2.0, 0.3]], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([[1.5], [-2.0]], dtype=torch.float64, requires_grad=True)
    out = {}
    for name, f in [("relu", torch.relu), ("leaky_relu", torch.nn.functional.leaky_relu),
                    ("hardtanh", torch.nn.functional.hardtanh)]:
        J, = torch.autograd.grad((f(x) @ w).sum(), [x], create_graph=True)  # the mask times w: needs w
        H, = torch.autograd.grad(J.sum(), [x], create_graph=True)
        gw, = torch.autograd.grad((J * J).sum(), [w])
        out[name] = (J.detach().cpu().numpy(), H.detach().cpu().numpy(), gw.cpu().numpy())
    return out


def test_second_derivative_through_a_mask_with_trainable_weights():
    out = _masked_second_derivatives(lucid)
    x, w = np.array([[0.5, -1.0], [2.0, 0.3]]), np.array([1.5, -2.0])
    masks = {"relu": (x > 0) * 1.0, "leaky_relu": np.where(x > 0, 1.0, 0.01),
             "hardtanh": (np.abs(x) < 1) * 1.0}
    for name, (J, H, gw) in out.items():
        np.testing.assert_allclose(J, masks[name] * w, rtol=1e-15)
        assert H.shape == (2, 2) and not H.any()  # the mask is piecewise constant
        np.testing.assert_allclose(gw[:, 0], 2 * (masks[name] ** 2).sum(0) * w, rtol=1e-14)


def test_second_derivative_through_a_mask_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = _masked_second_derivatives(lucid), _masked_second_derivatives(torch)
    for name in r:
        for a, b in zip(r[name], t[name]):
            np.testing.assert_allclose(a, b, rtol=1e-15)


@pytest.mark.parametrize("optimizer", ["adam", "L-BFGS"])
def test_save_and_restore_in_the_middle_of_training(tmp_path, optimizer):
    W, W_other = _fnn_weights([1, 5, 5, 1], 10, 0.5), _fnn_weights([1, 5, 5, 1], 11, 0.5)
    a, b, lrs = checkpoint_page(lucid, W, W_other, optimizer, tmp_path)
    for k in W:
        np.testing.assert_array_equal(a[k], b[k])
        assert np.abs(a[k] - W[k]).max() > 1e-4  # trained
    if optimizer == "adam":
        assert lrs == pytest.approx([0.01 / (1 + 0.5 * (n / 2)) for n in (1, 2, 3)], rel=1e-12)


def test_save_and_restore_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    W, W_other = _fnn_weights([1, 5, 5, 1], 10, 0.5), _fnn_weights([1, 5, 5, 1], 11, 0.5)
    for optimizer in ("adam", "L-BFGS"):
        r = checkpoint_page(lucid, W, W_other, optimizer, tmp_path)
        t = checkpoint_page(torch, W, W_other, optimizer, tmp_path)
        for k in W:
            np.testing.assert_allclose(r[1][k], t[1][k], rtol=1e-9, atol=1e-12)
        assert r[2] == pytest.approx(t[2], rel=1e-12)
