"""DLR-RM/stable-baselines3 (pure-PyTorch reinforcement learning) run on Lucid (``import lucid as torch``), batch 18:

- ``common/distributions.py``: ``sum_independent_dims``, ``DiagGaussianDistribution`` (``Normal``,
  ``rsample``), ``SquashedDiagGaussianDistribution`` with ``TanhBijector`` (``atanh`` through
  ``log1p``, ``clamp`` at ``finfo(dtype).eps``) and its ``log(1 - a**2 + eps)`` correction,
  ``CategoricalDistribution``, ``MultiCategoricalDistribution`` (``torch.split`` of the logits by a
  tuple of NumPy ints, ``unbind``, ``stack``), ``BernoulliDistribution`` (``round`` of the probs),
  ``StateDependentNoiseDistribution`` (gSDE: ``get_std`` with ``expln``, ``sample_weights`` with
  ``rsample((batch_size,))``, variance ``mm(latent_sde ** 2, std ** 2)``, ``get_noise`` by ``mm`` or
  ``bmm``, the squashed variant), ``make_proba_distribution`` and ``kl_divergence``.
- ``common/torch_layers.py``: ``FlattenExtractor``, ``NatureCNN`` (the three-conv Atari trunk at its
  smallest input, 36x36, its flatten size found by a ``no_grad`` forward of ``space.sample()``),
  ``create_mlp`` and ``MlpExtractor``.
- ``common/policies.py``: ``ActorCriticPolicy`` (``_build`` with orthogonal initialisation by
  ``module.apply(partial(init_weights, gain=...))``, ``forward``, ``evaluate_actions``,
  ``predict_values``, ``predict``), with ``preprocessing.preprocess_obs`` (``/ 255`` of images,
  ``one_hot`` of discrete observations).
- ``common/buffers.py``: ``RolloutBuffer`` (``add``, ``compute_returns_and_advantage``'s GAE loop in
  NumPy, ``get`` with ``swap_and_flatten`` and ``to_torch``) and ``ReplayBuffer`` (wrap-around,
  ``sample`` by ``np.random.randint``, ``dones * (1 - timeouts)``).
- ``common/utils.py``: ``explained_variance``, ``get_linear_fn``, ``constant_fn``/``get_schedule_fn``,
  ``update_learning_rate``, ``zip_strict``, ``get_parameters_by_name``, ``polyak_update``
  (``no_grad``, ``mul_`` and ``th.add(..., alpha=tau, out=target_param.data)``), ``obs_as_tensor``.
- The ``train()`` bodies of ``ppo/ppo.py`` (clipped surrogate, value clipping, ``approx_kl``,
  entropy bonus, ``clip_grad_norm_``), ``a2c/a2c.py``, ``dqn/dqn.py`` (greedy target ``max``,
  ``gather``, ``smooth_l1_loss``), ``sac/sac.py`` (``log_ent_coef`` auto-tuning, twin critics,
  ``sac/policies.py``'s ``Actor`` with ``LOG_STD_MIN``/``LOG_STD_MAX``) and ``td3/td3.py`` (target
  policy smoothing by ``normal_`` + ``clamp``, delayed actor updates, ``q1_forward``), on the
  algorithms' own attributes (a tiny stand-in object holds them; ``logger.record`` keeps the
  values).

No gymnasium: ``Box``/``Discrete``/``MultiDiscrete``/``MultiBinary`` are small NumPy stand-ins of
the spaces, and rollouts/replay data are fixed synthetic NumPy arrays. Each check is against NumPy:
closed-form log-probabilities and entropies, GAE by an explicit double sum, network outputs by a
NumPy forward, and one PPO/A2C/DQN update recomputed in float64 NumPy (loss by NumPy, its gradient by
central finite differences, then ``clip_grad_norm_`` and the SGD step by hand); SAC's critic loss
and ``log_ent_coef`` Adam step, TD3's smoothed target and delayed Polyak updates by hand; training
losses go down by stated factors. The parity tests run the same text on PyTorch with the same
weights and data.

Adapted: ``distributions.py`` is the stored release that still imported ``gym`` (its
``MultiCategoricalDistribution`` keeps ``self.distribution`` as a list); the policy and algorithm
classes keep only the methods these checks call (``BasePolicy``/``BaseAlgorithm`` plumbing — saving,
env wrappers, loggers, ``collect_rollouts`` — is left out), and ``ActorCriticPolicy`` is the form
with a shared features extractor; the gSDE page holds ``log_std`` in float64 beside float64 latents
(PyTorch's ``bmm`` refuses mixed dtypes, Lucid promotes: README "Differences from PyTorch").
Also covered: PPO's ``target_kl`` early stop (its printed line), ``ReplayBuffer``'s
``optimize_memory_usage`` variant, and a policy on a ``Discrete`` observation space (``one_hot``).

Found on the way: ``Tensor.__eq__``/``__ne__`` with an object they cannot convert (``object()``, a
dict) raised ``TypeError`` where PyTorch returns ``NotImplemented`` (so ``t == object()`` is ``False``).
SB3's ``zip_strict`` tests ``sentinel in combo`` on tuples of parameters, so ``polyak_update`` (SAC/TD3
target updates) failed; fixed in ``lucid/ops/elementwise/comparison.py``
(``test_tensor_eq_with_a_foreign_object_is_not_an_error``).
"""
from functools import partial
from itertools import zip_longest
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.distributions  # noqa: F401


# ----------------------------------------------------------------------------------------------
# NumPy stand-ins of gymnasium.spaces (only what the ported code reads).


class Box:
    def __init__(self, low, high, shape, dtype=np.float32, seed=0):
        self.low = np.full(shape, low, dtype=dtype)
        self.high = np.full(shape, high, dtype=dtype)
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._rng = np.random.default_rng(seed)

    def sample(self):
        if self.dtype == np.uint8:
            return self._rng.integers(0, 256, self.shape).astype(np.uint8)
        return self._rng.uniform(self.low, self.high).astype(self.dtype)


class Discrete:
    def __init__(self, n):
        self.n = n
        self.shape = ()
        self.dtype = np.dtype(np.int64)


class MultiDiscrete:
    def __init__(self, nvec):
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.shape = self.nvec.shape
        self.dtype = np.dtype(np.int64)


class MultiBinary:
    def __init__(self, n):
        self.n = n
        self.shape = (n,)
        self.dtype = np.dtype(np.int8)


spaces = SimpleNamespace(Box=Box, Discrete=Discrete, MultiDiscrete=MultiDiscrete, MultiBinary=MultiBinary)


def get_action_dim(action_space):
    if isinstance(action_space, spaces.Box):
        return int(np.prod(action_space.shape))
    elif isinstance(action_space, spaces.Discrete):
        return 1
    elif isinstance(action_space, spaces.MultiDiscrete):
        return int(len(action_space.nvec))
    elif isinstance(action_space, spaces.MultiBinary):
        return int(action_space.n)
    raise NotImplementedError(f"{action_space} action space is not supported")


def get_obs_shape(observation_space):
    if isinstance(observation_space, spaces.Box):
        return observation_space.shape
    elif isinstance(observation_space, spaces.Discrete):
        return (1,)
    raise NotImplementedError(f"{observation_space} observation space is not supported")


def get_flattened_obs_dim(observation_space):
    if isinstance(observation_space, spaces.Discrete):
        return observation_space.n
    return int(np.prod(observation_space.shape))


def is_image_space(observation_space, check_channels=False, normalized_image=False):
    if isinstance(observation_space, spaces.Box) and len(observation_space.shape) == 3:
        if not normalized_image and observation_space.dtype != np.uint8:
            return False
        return True
    return False


# ----------------------------------------------------------------------------------------------
# The ported modules, each a function of the module handed in as ``th``.


def sb3(th):
    nn = th.nn
    F = th.nn.functional
    Normal = th.distributions.Normal
    Categorical = th.distributions.Categorical
    Bernoulli = th.distributions.Bernoulli

    # ---------------- common/distributions.py ----------------
    class Distribution:
        """Abstract base class for distributions."""

        def __init__(self):
            super(Distribution, self).__init__()
            self.distribution = None

        def get_actions(self, deterministic: bool = False):
            if deterministic:
                return self.mode()
            return self.sample()

    def sum_independent_dims(tensor):
        if len(tensor.shape) > 1:
            tensor = tensor.sum(dim=1)
        else:
            tensor = tensor.sum()
        return tensor

    class DiagGaussianDistribution(Distribution):
        def __init__(self, action_dim: int):
            super(DiagGaussianDistribution, self).__init__()
            self.action_dim = action_dim
            self.mean_actions = None
            self.log_std = None

        def proba_distribution_net(self, latent_dim: int, log_std_init: float = 0.0):
            mean_actions = nn.Linear(latent_dim, self.action_dim)
            # TODO: allow action dependent std
            log_std = nn.Parameter(th.ones(self.action_dim) * log_std_init, requires_grad=True)
            return mean_actions, log_std

        def proba_distribution(self, mean_actions, log_std):
            action_std = th.ones_like(mean_actions) * log_std.exp()
            self.distribution = Normal(mean_actions, action_std)
            return self

        def log_prob(self, actions):
            log_prob = self.distribution.log_prob(actions)
            return sum_independent_dims(log_prob)

        def entropy(self):
            return sum_independent_dims(self.distribution.entropy())

        def sample(self):
            # Reparametrization trick to pass gradients
            return self.distribution.rsample()

        def mode(self):
            return self.distribution.mean

        def actions_from_params(self, mean_actions, log_std, deterministic: bool = False):
            # Update the proba distribution
            self.proba_distribution(mean_actions, log_std)
            return self.get_actions(deterministic=deterministic)

        def log_prob_from_params(self, mean_actions, log_std):
            actions = self.actions_from_params(mean_actions, log_std)
            log_prob = self.log_prob(actions)
            return actions, log_prob

    class SquashedDiagGaussianDistribution(DiagGaussianDistribution):
        def __init__(self, action_dim: int, epsilon: float = 1e-6):
            super(SquashedDiagGaussianDistribution, self).__init__(action_dim)
            # Avoid NaN (prevents division by zero or log of zero)
            self.epsilon = epsilon
            self.gaussian_actions = None

        def proba_distribution(self, mean_actions, log_std):
            super(SquashedDiagGaussianDistribution, self).proba_distribution(mean_actions, log_std)
            return self

        def log_prob(self, actions, gaussian_actions=None):
            # Inverse tanh
            # Naive implementation (not stable): 0.5 * torch.log((1 + x) / (1 - x))
            # We use numpy to avoid numerical instability
            if gaussian_actions is None:
                # It will be clipped to avoid NaN when inversing tanh
                gaussian_actions = TanhBijector.inverse(actions)

            # Log likelihood for a Gaussian distribution
            log_prob = super(SquashedDiagGaussianDistribution, self).log_prob(gaussian_actions)
            # Squash correction (from original SAC implementation)
            # this comes from the fact that tanh is bijective and differentiable
            log_prob -= th.sum(th.log(1 - actions ** 2 + self.epsilon), dim=1)
            return log_prob

        def entropy(self):
            # No analytical form,
            # entropy needs to be estimated using -log_prob.mean()
            return None

        def sample(self):
            # Reparametrization trick to pass gradients
            self.gaussian_actions = super().sample()
            return th.tanh(self.gaussian_actions)

        def mode(self):
            self.gaussian_actions = super().mode()
            # Squash the output
            return th.tanh(self.gaussian_actions)

        def log_prob_from_params(self, mean_actions, log_std):
            action = self.actions_from_params(mean_actions, log_std)
            log_prob = self.log_prob(action, self.gaussian_actions)
            return action, log_prob

    class CategoricalDistribution(Distribution):
        def __init__(self, action_dim: int):
            super(CategoricalDistribution, self).__init__()
            self.action_dim = action_dim

        def proba_distribution_net(self, latent_dim: int):
            action_logits = nn.Linear(latent_dim, self.action_dim)
            return action_logits

        def proba_distribution(self, action_logits):
            self.distribution = Categorical(logits=action_logits)
            return self

        def log_prob(self, actions):
            return self.distribution.log_prob(actions)

        def entropy(self):
            return self.distribution.entropy()

        def sample(self):
            return self.distribution.sample()

        def mode(self):
            return th.argmax(self.distribution.probs, dim=1)

        def actions_from_params(self, action_logits, deterministic: bool = False):
            # Update the proba distribution
            self.proba_distribution(action_logits)
            return self.get_actions(deterministic=deterministic)

        def log_prob_from_params(self, action_logits):
            actions = self.actions_from_params(action_logits)
            log_prob = self.log_prob(actions)
            return actions, log_prob

    class MultiCategoricalDistribution(Distribution):
        def __init__(self, action_dims):
            super(MultiCategoricalDistribution, self).__init__()
            self.action_dims = action_dims

        def proba_distribution_net(self, latent_dim: int):
            action_logits = nn.Linear(latent_dim, sum(self.action_dims))
            return action_logits

        def proba_distribution(self, action_logits):
            self.distribution = [Categorical(logits=split) for split in th.split(action_logits, tuple(self.action_dims), dim=1)]
            return self

        def log_prob(self, actions):
            # Extract each discrete action and compute log prob for their respective distributions
            return th.stack(
                [dist.log_prob(action) for dist, action in zip(self.distribution, th.unbind(actions, dim=1))], dim=1
            ).sum(dim=1)

        def entropy(self):
            return th.stack([dist.entropy() for dist in self.distribution], dim=1).sum(dim=1)

        def sample(self):
            return th.stack([dist.sample() for dist in self.distribution], dim=1)

        def mode(self):
            return th.stack([th.argmax(dist.probs, dim=1) for dist in self.distribution], dim=1)

        def actions_from_params(self, action_logits, deterministic: bool = False):
            # Update the proba distribution
            self.proba_distribution(action_logits)
            return self.get_actions(deterministic=deterministic)

        def log_prob_from_params(self, action_logits):
            actions = self.actions_from_params(action_logits)
            log_prob = self.log_prob(actions)
            return actions, log_prob

    class BernoulliDistribution(Distribution):
        def __init__(self, action_dims: int):
            super(BernoulliDistribution, self).__init__()
            self.action_dims = action_dims

        def proba_distribution_net(self, latent_dim: int):
            action_logits = nn.Linear(latent_dim, self.action_dims)
            return action_logits

        def proba_distribution(self, action_logits):
            self.distribution = Bernoulli(logits=action_logits)
            return self

        def log_prob(self, actions):
            return self.distribution.log_prob(actions).sum(dim=1)

        def entropy(self):
            return self.distribution.entropy().sum(dim=1)

        def sample(self):
            return self.distribution.sample()

        def mode(self):
            return th.round(self.distribution.probs)

        def actions_from_params(self, action_logits, deterministic: bool = False):
            # Update the proba distribution
            self.proba_distribution(action_logits)
            return self.get_actions(deterministic=deterministic)

        def log_prob_from_params(self, action_logits):
            actions = self.actions_from_params(action_logits)
            log_prob = self.log_prob(actions)
            return actions, log_prob

    class StateDependentNoiseDistribution(Distribution):
        def __init__(
            self,
            action_dim: int,
            full_std: bool = True,
            use_expln: bool = False,
            squash_output: bool = False,
            learn_features: bool = False,
            epsilon: float = 1e-6,
        ):
            super(StateDependentNoiseDistribution, self).__init__()
            self.action_dim = action_dim
            self.latent_sde_dim = None
            self.mean_actions = None
            self.log_std = None
            self.weights_dist = None
            self.exploration_mat = None
            self.exploration_matrices = None
            self._latent_sde = None
            self.use_expln = use_expln
            self.full_std = full_std
            self.epsilon = epsilon
            self.learn_features = learn_features
            if squash_output:
                self.bijector = TanhBijector(epsilon)
            else:
                self.bijector = None

        def get_std(self, log_std):
            if self.use_expln:
                # From gSDE paper, it allows to keep variance
                # above zero and prevent it from growing too fast
                below_threshold = th.exp(log_std) * (log_std <= 0)
                # Avoid NaN: zeros values that are below zero
                safe_log_std = log_std * (log_std > 0) + self.epsilon
                above_threshold = (th.log1p(safe_log_std) + 1.0) * (log_std > 0)
                std = below_threshold + above_threshold
            else:
                # Use normal exponential
                std = th.exp(log_std)

            if self.full_std:
                return std
            # Reduce the number of parameters:
            return th.ones(self.latent_sde_dim, self.action_dim).to(log_std.device) * std

        def sample_weights(self, log_std, batch_size: int = 1) -> None:
            std = self.get_std(log_std)
            self.weights_dist = Normal(th.zeros_like(std), std)
            # Reparametrization trick to pass gradients
            self.exploration_mat = self.weights_dist.rsample()
            # Pre-compute matrices in case of parallel exploration
            self.exploration_matrices = self.weights_dist.rsample((batch_size,))

        def proba_distribution_net(self, latent_dim: int, log_std_init: float = -2.0, latent_sde_dim=None):
            # Network for the deterministic action, it represents the mean of the distribution
            mean_actions_net = nn.Linear(latent_dim, self.action_dim)
            # When we learn features for the noise, the feature dimension
            # can be different between the policy and the noise network
            self.latent_sde_dim = latent_dim if latent_sde_dim is None else latent_sde_dim
            # Reduce the number of parameters if needed
            log_std = th.ones(self.latent_sde_dim, self.action_dim) if self.full_std else th.ones(self.latent_sde_dim, 1)
            # Transform it to a parameter so it can be optimized
            log_std = nn.Parameter(log_std * log_std_init, requires_grad=True)
            # Sample an exploration matrix
            self.sample_weights(log_std)
            return mean_actions_net, log_std

        def proba_distribution(self, mean_actions, log_std, latent_sde):
            # Stop gradient if we don't want to influence the features
            self._latent_sde = latent_sde if self.learn_features else latent_sde.detach()
            variance = th.mm(self._latent_sde ** 2, self.get_std(log_std) ** 2)
            self.distribution = Normal(mean_actions, th.sqrt(variance + self.epsilon))
            return self

        def log_prob(self, actions):
            if self.bijector is not None:
                gaussian_actions = self.bijector.inverse(actions)
            else:
                gaussian_actions = actions
            # log likelihood for a gaussian
            log_prob = self.distribution.log_prob(gaussian_actions)
            # Sum along action dim
            log_prob = sum_independent_dims(log_prob)

            if self.bijector is not None:
                # Squash correction (from original SAC implementation)
                log_prob -= th.sum(self.bijector.log_prob_correction(gaussian_actions), dim=1)
            return log_prob

        def entropy(self):
            if self.bijector is not None:
                # No analytical form,
                # entropy needs to be estimated using -log_prob.mean()
                return None
            return sum_independent_dims(self.distribution.entropy())

        def sample(self):
            noise = self.get_noise(self._latent_sde)
            actions = self.distribution.mean + noise
            if self.bijector is not None:
                return self.bijector.forward(actions)
            return actions

        def mode(self):
            actions = self.distribution.mean
            if self.bijector is not None:
                return self.bijector.forward(actions)
            return actions

        def get_noise(self, latent_sde):
            latent_sde = latent_sde if self.learn_features else latent_sde.detach()
            # Default case: only one exploration matrix
            if len(latent_sde) == 1 or len(latent_sde) != len(self.exploration_matrices):
                return th.mm(latent_sde, self.exploration_mat)
            # Use batch matrix multiplication for efficient computation
            # (batch_size, n_features) -> (batch_size, 1, n_features)
            latent_sde = latent_sde.unsqueeze(1)
            # (batch_size, 1, n_actions)
            noise = th.bmm(latent_sde, self.exploration_matrices)
            return noise.squeeze(1)

        def actions_from_params(self, mean_actions, log_std, latent_sde, deterministic: bool = False):
            # Update the proba distribution
            self.proba_distribution(mean_actions, log_std, latent_sde)
            return self.get_actions(deterministic=deterministic)

        def log_prob_from_params(self, mean_actions, log_std, latent_sde):
            actions = self.actions_from_params(mean_actions, log_std, latent_sde)
            log_prob = self.log_prob(actions)
            return actions, log_prob

    class TanhBijector(object):
        def __init__(self, epsilon: float = 1e-6):
            super(TanhBijector, self).__init__()
            self.epsilon = epsilon

        @staticmethod
        def forward(x):
            return th.tanh(x)

        @staticmethod
        def atanh(x):
            """
            Inverse of Tanh

            Taken from Pyro: https://github.com/pyro-ppl/pyro
            0.5 * torch.log((1 + x ) / (1 - x))
            """
            return 0.5 * (x.log1p() - (-x).log1p())

        @staticmethod
        def inverse(y):
            eps = th.finfo(y.dtype).eps
            # Clip the action to avoid NaN
            return TanhBijector.atanh(y.clamp(min=-1.0 + eps, max=1.0 - eps))

        def log_prob_correction(self, x):
            # Squash correction (from original SAC implementation)
            return th.log(1.0 - th.tanh(x) ** 2 + self.epsilon)

    def make_proba_distribution(action_space, use_sde: bool = False, dist_kwargs=None):
        if dist_kwargs is None:
            dist_kwargs = {}

        if isinstance(action_space, spaces.Box):
            assert len(action_space.shape) == 1, "Error: the action space must be a vector"
            cls = StateDependentNoiseDistribution if use_sde else DiagGaussianDistribution
            return cls(get_action_dim(action_space), **dist_kwargs)
        elif isinstance(action_space, spaces.Discrete):
            return CategoricalDistribution(action_space.n, **dist_kwargs)
        elif isinstance(action_space, spaces.MultiDiscrete):
            return MultiCategoricalDistribution(action_space.nvec, **dist_kwargs)
        elif isinstance(action_space, spaces.MultiBinary):
            return BernoulliDistribution(action_space.n, **dist_kwargs)
        else:
            raise NotImplementedError(
                "Error: probability distribution, not implemented for action space"
                f"of type {type(action_space)}."
                " Must be of type Gym Spaces: Box, Discrete, MultiDiscrete or MultiBinary."
            )

    def kl_divergence(dist_true, dist_pred):
        # KL Divergence for different distribution types is out of scope
        assert dist_true.__class__ == dist_pred.__class__, "Error: input distributions should be the same type"

        # MultiCategoricalDistribution is not a PyTorch Distribution subclass
        # so we need to implement it ourselves!
        if isinstance(dist_pred, MultiCategoricalDistribution):
            assert np.allclose(dist_pred.action_dims, dist_true.action_dims), "Error: distributions must have the same input space"
            return th.stack(
                [th.distributions.kl_divergence(p, q) for p, q in zip(dist_true.distribution, dist_pred.distribution)],
                dim=1,
            ).sum(dim=1)

        # Use the PyTorch kl_divergence implementation
        else:
            return th.distributions.kl_divergence(dist_true.distribution, dist_pred.distribution)

    # ---------------- common/utils.py ----------------
    def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> np.ndarray:
        assert y_true.ndim == 1 and y_pred.ndim == 1
        var_y = np.var(y_true)
        return np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

    def update_learning_rate(optimizer, learning_rate: float) -> None:
        for param_group in optimizer.param_groups:
            param_group["lr"] = learning_rate

    def get_schedule_fn(value_schedule):
        # If the passed schedule is a float
        # create a constant function
        if isinstance(value_schedule, (float, int)):
            # Cast to float to avoid errors
            value_schedule = constant_fn(float(value_schedule))
        else:
            assert callable(value_schedule)
        return value_schedule

    def get_linear_fn(start: float, end: float, end_fraction: float):
        def func(progress_remaining: float) -> float:
            if (1 - progress_remaining) > end_fraction:
                return end
            else:
                return start + (1 - progress_remaining) * (end - start) / end_fraction

        return func

    def constant_fn(val: float):
        def func(_):
            return val

        return func

    def get_device(device="auto"):
        # Cuda by default
        if device == "auto":
            device = "cuda"
        # Force conversion to th.device
        device = th.device(device)

        # Cuda not available
        if device.type == th.device("cuda").type and not th.cuda.is_available():
            return th.device("cpu")

        return device

    def zip_strict(*iterables):
        # As in Stackoverflow #32954486, use
        # new object for "empty" in case we have
        # Nones in iterable.
        sentinel = object()
        for combo in zip_longest(*iterables, fillvalue=sentinel):
            if sentinel in combo:
                raise ValueError("Iterables have different lengths")
            yield combo

    def polyak_update(params, target_params, tau: float) -> None:
        with th.no_grad():
            # zip does not raise an exception if length of parameters does not match.
            for param, target_param in zip_strict(params, target_params):
                target_param.data.mul_(1 - tau)
                th.add(target_param.data, param.data, alpha=tau, out=target_param.data)

    def get_parameters_by_name(model, included_names):
        return [param for name, param in model.state_dict().items() if any([key in name for key in included_names])]

    def obs_as_tensor(obs, device):
        if isinstance(obs, np.ndarray):
            return th.as_tensor(obs).to(device)
        elif isinstance(obs, dict):
            return {key: th.as_tensor(_obs).to(device) for (key, _obs) in obs.items()}
        else:
            raise Exception(f"Unrecognized type of observation {type(obs)}")

    # ---------------- common/preprocessing.py ----------------
    def preprocess_obs(obs, observation_space, normalize_images: bool = True):
        if isinstance(observation_space, spaces.Box):
            if normalize_images and is_image_space(observation_space):
                return obs.float() / 255.0
            return obs.float()

        elif isinstance(observation_space, spaces.Discrete):
            # One hot encoding and convert to float to avoid errors
            return F.one_hot(obs.long(), num_classes=observation_space.n).float()

        else:
            raise NotImplementedError(f"Preprocessing not implemented for {observation_space}")

    # ---------------- common/torch_layers.py ----------------
    class BaseFeaturesExtractor(nn.Module):
        def __init__(self, observation_space, features_dim: int = 0) -> None:
            super().__init__()
            assert features_dim > 0
            self._observation_space = observation_space
            self._features_dim = features_dim

        @property
        def features_dim(self) -> int:
            return self._features_dim

    class FlattenExtractor(BaseFeaturesExtractor):
        def __init__(self, observation_space) -> None:
            super().__init__(observation_space, get_flattened_obs_dim(observation_space))
            self.flatten = nn.Flatten()

        def forward(self, observations):
            return self.flatten(observations)

    class NatureCNN(BaseFeaturesExtractor):
        def __init__(self, observation_space, features_dim: int = 512, normalized_image: bool = False) -> None:
            assert isinstance(observation_space, spaces.Box), (
                "NatureCNN must be used with a gym.spaces.Box ",
                f"observation space, not {observation_space}",
            )
            super().__init__(observation_space, features_dim)
            # We assume CxHxW images (channels first)
            # Re-ordering will be done by pre-preprocessing or wrapper
            assert is_image_space(observation_space, check_channels=False, normalized_image=normalized_image)
            n_input_channels = observation_space.shape[0]
            self.cnn = nn.Sequential(
                nn.Conv2d(n_input_channels, 32, kernel_size=8, stride=4, padding=0),
                nn.ReLU(),
                nn.Conv2d(32, 64, kernel_size=4, stride=2, padding=0),
                nn.ReLU(),
                nn.Conv2d(64, 64, kernel_size=3, stride=1, padding=0),
                nn.ReLU(),
                nn.Flatten(),
            )

            # Compute shape by doing one forward pass
            with th.no_grad():
                n_flatten = self.cnn(th.as_tensor(observation_space.sample()[None]).float()).shape[1]

            self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

        def forward(self, observations):
            return self.linear(self.cnn(observations))

    def create_mlp(input_dim, output_dim, net_arch, activation_fn=nn.ReLU, squash_output=False, with_bias=True):
        if len(net_arch) > 0:
            modules = [nn.Linear(input_dim, net_arch[0], bias=with_bias), activation_fn()]
        else:
            modules = []

        for idx in range(len(net_arch) - 1):
            modules.append(nn.Linear(net_arch[idx], net_arch[idx + 1], bias=with_bias))
            modules.append(activation_fn())

        if output_dim > 0:
            last_layer_dim = net_arch[-1] if len(net_arch) > 0 else input_dim
            modules.append(nn.Linear(last_layer_dim, output_dim, bias=with_bias))
        if squash_output:
            modules.append(nn.Tanh())
        return modules

    class MlpExtractor(nn.Module):
        def __init__(self, feature_dim, net_arch, activation_fn, device="auto") -> None:
            super().__init__()
            device = get_device(device)
            policy_net = []
            value_net = []
            last_layer_dim_pi = feature_dim
            last_layer_dim_vf = feature_dim

            # save dimensions of layers in policy and value nets
            if isinstance(net_arch, dict):
                # Note: if key is not specified, assume linear network
                pi_layers_dims = net_arch.get("pi", [])  # Layer sizes of the policy network
                vf_layers_dims = net_arch.get("vf", [])  # Layer sizes of the value network
            else:
                pi_layers_dims = vf_layers_dims = net_arch
            # Iterate through the policy layers and build the policy net
            for curr_layer_dim in pi_layers_dims:
                policy_net.append(nn.Linear(last_layer_dim_pi, curr_layer_dim))
                policy_net.append(activation_fn())
                last_layer_dim_pi = curr_layer_dim
            # Iterate through the value layers and build the value net
            for curr_layer_dim in vf_layers_dims:
                value_net.append(nn.Linear(last_layer_dim_vf, curr_layer_dim))
                value_net.append(activation_fn())
                last_layer_dim_vf = curr_layer_dim

            # Save dim, used to create the distributions
            self.latent_dim_pi = last_layer_dim_pi
            self.latent_dim_vf = last_layer_dim_vf

            # Create networks
            # If the list of layers is empty, the network will just act as an Identity module
            self.policy_net = nn.Sequential(*policy_net).to(device)
            self.value_net = nn.Sequential(*value_net).to(device)

        def forward(self, features):
            return self.forward_actor(features), self.forward_critic(features)

        def forward_actor(self, features):
            return self.policy_net(features)

        def forward_critic(self, features):
            return self.value_net(features)

    # ---------------- common/policies.py (ActorCriticPolicy) ----------------
    class ActorCriticPolicy(nn.Module):
        def __init__(
            self,
            observation_space,
            action_space,
            lr_schedule,
            net_arch=None,
            activation_fn=nn.Tanh,
            ortho_init: bool = True,
            use_sde: bool = False,
            log_std_init: float = 0.0,
            full_std: bool = True,
            use_expln: bool = False,
            squash_output: bool = False,
            features_extractor_class=FlattenExtractor,
            features_extractor_kwargs=None,
            normalize_images: bool = True,
            optimizer_class=th.optim.Adam,
            optimizer_kwargs=None,
            device=None,
        ):
            if optimizer_kwargs is None:
                optimizer_kwargs = {}
                # Small values to avoid NaN in Adam optimizer
                if optimizer_class == th.optim.Adam:
                    optimizer_kwargs["eps"] = 1e-5
            super().__init__()
            self.observation_space = observation_space
            self.action_space = action_space
            self.optimizer_class = optimizer_class
            self.optimizer_kwargs = optimizer_kwargs
            self.squash_output = squash_output
            self.device = device if device is not None else th.empty(0).device
            self.features_extractor_kwargs = features_extractor_kwargs or {}

            # Default network architecture, from stable-baselines
            if net_arch is None:
                if features_extractor_class == NatureCNN:
                    net_arch = []
                else:
                    net_arch = dict(pi=[64, 64], vf=[64, 64])

            self.net_arch = net_arch
            self.activation_fn = activation_fn
            self.ortho_init = ortho_init

            self.features_extractor = features_extractor_class(self.observation_space, **self.features_extractor_kwargs)
            self.features_dim = self.features_extractor.features_dim

            self.normalize_images = normalize_images
            self.log_std_init = log_std_init
            dist_kwargs = None
            # Keyword arguments for gSDE distribution
            if use_sde:
                dist_kwargs = {
                    "full_std": full_std,
                    "squash_output": squash_output,
                    "use_expln": use_expln,
                    "learn_features": False,
                }

            self.use_sde = use_sde
            self.dist_kwargs = dist_kwargs

            # Action distribution
            self.action_dist = make_proba_distribution(action_space, use_sde=use_sde, dist_kwargs=dist_kwargs)

            self._build(lr_schedule)

        @staticmethod
        def init_weights(module, gain: float = 1) -> None:
            """
            Orthogonal initialization (used in PPO and A2C)
            """
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.orthogonal_(module.weight, gain=gain)
                if module.bias is not None:
                    module.bias.data.fill_(0.0)

        def set_training_mode(self, mode: bool) -> None:
            self.train(mode)

        def reset_noise(self, n_envs: int = 1) -> None:
            assert isinstance(self.action_dist, StateDependentNoiseDistribution), "reset_noise() is only available when using gSDE"
            self.action_dist.sample_weights(self.log_std, batch_size=n_envs)

        def _build_mlp_extractor(self) -> None:
            self.mlp_extractor = MlpExtractor(
                self.features_dim,
                net_arch=self.net_arch,
                activation_fn=self.activation_fn,
                device=self.device,
            )

        def _build(self, lr_schedule) -> None:
            self._build_mlp_extractor()

            latent_dim_pi = self.mlp_extractor.latent_dim_pi

            if isinstance(self.action_dist, DiagGaussianDistribution):
                self.action_net, self.log_std = self.action_dist.proba_distribution_net(
                    latent_dim=latent_dim_pi, log_std_init=self.log_std_init
                )
            elif isinstance(self.action_dist, StateDependentNoiseDistribution):
                self.action_net, self.log_std = self.action_dist.proba_distribution_net(
                    latent_dim=latent_dim_pi, latent_sde_dim=latent_dim_pi, log_std_init=self.log_std_init
                )
            elif isinstance(self.action_dist, (CategoricalDistribution, MultiCategoricalDistribution, BernoulliDistribution)):
                self.action_net = self.action_dist.proba_distribution_net(latent_dim=latent_dim_pi)
            else:
                raise NotImplementedError(f"Unsupported distribution '{self.action_dist}'.")

            self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)
            # Init weights: use orthogonal initialization
            # with small initial weight for the output
            if self.ortho_init:
                # TODO: check for features_extractor
                # Values from stable-baselines.
                # features_extractor/mlp values are
                # originally from openai/baselines (default gains/init_scales).
                module_gains = {
                    self.features_extractor: np.sqrt(2),
                    self.mlp_extractor: np.sqrt(2),
                    self.action_net: 0.01,
                    self.value_net: 1,
                }
                for module, gain in module_gains.items():
                    module.apply(partial(self.init_weights, gain=gain))

            # Setup optimizer with initial learning rate
            self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

        def extract_features(self, obs):
            preprocessed_obs = preprocess_obs(obs, self.observation_space, normalize_images=self.normalize_images)
            return self.features_extractor(preprocessed_obs)

        def forward(self, obs, deterministic: bool = False):
            # Preprocess the observation if needed
            features = self.extract_features(obs)
            latent_pi, latent_vf = self.mlp_extractor(features)
            # Evaluate the values for the given observations
            values = self.value_net(latent_vf)
            distribution = self._get_action_dist_from_latent(latent_pi)
            actions = distribution.get_actions(deterministic=deterministic)
            log_prob = distribution.log_prob(actions)
            actions = actions.reshape((-1, *self.action_space.shape))
            return actions, values, log_prob

        def _get_action_dist_from_latent(self, latent_pi):
            mean_actions = self.action_net(latent_pi)

            if isinstance(self.action_dist, DiagGaussianDistribution):
                return self.action_dist.proba_distribution(mean_actions, self.log_std)
            elif isinstance(self.action_dist, CategoricalDistribution):
                # Here mean_actions are the logits before the softmax
                return self.action_dist.proba_distribution(action_logits=mean_actions)
            elif isinstance(self.action_dist, MultiCategoricalDistribution):
                # Here mean_actions are the flattened logits
                return self.action_dist.proba_distribution(action_logits=mean_actions)
            elif isinstance(self.action_dist, BernoulliDistribution):
                # Here mean_actions are the logits (before rounding to get the binary actions)
                return self.action_dist.proba_distribution(action_logits=mean_actions)
            elif isinstance(self.action_dist, StateDependentNoiseDistribution):
                return self.action_dist.proba_distribution(mean_actions, self.log_std, latent_pi)
            else:
                raise ValueError("Invalid action distribution")

        def _predict(self, observation, deterministic: bool = False):
            return self.get_distribution(observation).get_actions(deterministic=deterministic)

        def evaluate_actions(self, obs, actions):
            # Preprocess the observation if needed
            features = self.extract_features(obs)
            latent_pi, latent_vf = self.mlp_extractor(features)
            distribution = self._get_action_dist_from_latent(latent_pi)
            log_prob = distribution.log_prob(actions)
            values = self.value_net(latent_vf)
            entropy = distribution.entropy()
            return values, log_prob, entropy

        def get_distribution(self, obs):
            features = self.extract_features(obs)
            latent_pi = self.mlp_extractor.forward_actor(features)
            return self._get_action_dist_from_latent(latent_pi)

        def predict_values(self, obs):
            features = self.extract_features(obs)
            latent_vf = self.mlp_extractor.forward_critic(features)
            return self.value_net(latent_vf)

        def obs_to_tensor(self, observation):
            vectorized_env = observation.shape != self.observation_space.shape
            observation = observation.reshape((-1, *self.observation_space.shape))
            obs_tensor = obs_as_tensor(observation, self.device)
            return obs_tensor, vectorized_env

        def predict(self, observation, state=None, episode_start=None, deterministic: bool = False):
            # Switch to eval mode (this affects batch norm / dropout)
            self.set_training_mode(False)

            observation, vectorized_env = self.obs_to_tensor(observation)

            with th.no_grad():
                actions = self._predict(observation, deterministic=deterministic)
            # Convert to numpy, and reshape to the original action shape
            actions = actions.cpu().numpy().reshape((-1, *self.action_space.shape))

            if isinstance(self.action_space, spaces.Box):
                # Actions could be on arbitrary scale, so clip the actions to avoid
                # out of bound error (e.g. if sampling from a Gaussian distribution)
                actions = np.clip(actions, self.action_space.low, self.action_space.high)

            # Remove batch dimension if needed
            if not vectorized_env:
                actions = actions.squeeze(axis=0)

            return actions, state

    # ---------------- common/buffers.py ----------------
    ReplayBufferSamples = SimpleNamespace
    RolloutBufferSamples = SimpleNamespace

    class BaseBuffer:
        def __init__(self, buffer_size, observation_space, action_space, device="auto", n_envs: int = 1):
            super().__init__()
            self.buffer_size = buffer_size
            self.observation_space = observation_space
            self.action_space = action_space
            self.obs_shape = get_obs_shape(observation_space)

            self.action_dim = get_action_dim(action_space)
            self.pos = 0
            self.full = False
            self.device = get_device(device)
            self.n_envs = n_envs

        @staticmethod
        def swap_and_flatten(arr: np.ndarray) -> np.ndarray:
            shape = arr.shape
            if len(shape) < 3:
                shape = (*shape, 1)
            return arr.swapaxes(0, 1).reshape(shape[0] * shape[1], *shape[2:])

        def size(self) -> int:
            if self.full:
                return self.buffer_size
            return self.pos

        def reset(self) -> None:
            self.pos = 0
            self.full = False

        def sample(self, batch_size: int, env=None):
            upper_bound = self.buffer_size if self.full else self.pos
            batch_inds = np.random.randint(0, upper_bound, size=batch_size)
            return self._get_samples(batch_inds, env=env)

        def to_torch(self, array: np.ndarray, copy: bool = True):
            if copy:
                return th.tensor(array, device=self.device)
            return th.as_tensor(array, device=self.device)

        @staticmethod
        def _normalize_obs(obs, env=None):
            if env is not None:
                return env.normalize_obs(obs)
            return obs

        @staticmethod
        def _normalize_reward(reward: np.ndarray, env=None) -> np.ndarray:
            if env is not None:
                return env.normalize_reward(reward).astype(np.float32)
            return reward

    class ReplayBuffer(BaseBuffer):
        def __init__(self, buffer_size, observation_space, action_space, device="auto", n_envs: int = 1,
                     optimize_memory_usage: bool = False, handle_timeout_termination: bool = True):
            super().__init__(buffer_size, observation_space, action_space, device, n_envs=n_envs)

            # Adjust buffer size
            self.buffer_size = max(buffer_size // n_envs, 1)

            if optimize_memory_usage and handle_timeout_termination:
                raise ValueError(
                    "ReplayBuffer does not support optimize_memory_usage = True "
                    "and handle_timeout_termination = True simultaneously."
                )
            self.optimize_memory_usage = optimize_memory_usage

            self.observations = np.zeros((self.buffer_size, self.n_envs, *self.obs_shape), dtype=observation_space.dtype)

            if not optimize_memory_usage:
                # When optimizing memory, `observations` contains also the next observation
                self.next_observations = np.zeros((self.buffer_size, self.n_envs, *self.obs_shape), dtype=observation_space.dtype)

            self.actions = np.zeros(
                (self.buffer_size, self.n_envs, self.action_dim), dtype=self._maybe_cast_dtype(action_space.dtype)
            )

            self.rewards = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
            self.dones = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
            # Handle timeouts termination properly if needed
            # see https://github.com/DLR-RM/stable-baselines3/issues/284
            self.handle_timeout_termination = handle_timeout_termination
            self.timeouts = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)

        def add(self, obs, next_obs, action, reward, done, infos) -> None:
            # Reshape needed when using multiple envs with discrete observations
            # as numpy cannot broadcast (n_discrete,) to (n_discrete, 1)
            if isinstance(self.observation_space, spaces.Discrete):
                obs = obs.reshape((self.n_envs, *self.obs_shape))
                next_obs = next_obs.reshape((self.n_envs, *self.obs_shape))

            # Reshape to handle multi-dim and discrete action spaces, see GH #970 #1392
            action = action.reshape((self.n_envs, self.action_dim))

            # Copy to avoid modification by reference
            self.observations[self.pos] = np.array(obs)

            if self.optimize_memory_usage:
                self.observations[(self.pos + 1) % self.buffer_size] = np.array(next_obs)
            else:
                self.next_observations[self.pos] = np.array(next_obs)

            self.actions[self.pos] = np.array(action)
            self.rewards[self.pos] = np.array(reward)
            self.dones[self.pos] = np.array(done)

            if self.handle_timeout_termination:
                self.timeouts[self.pos] = np.array([info.get("TimeLimit.truncated", False) for info in infos])

            self.pos += 1
            if self.pos == self.buffer_size:
                self.full = True
                self.pos = 0

        def sample(self, batch_size: int, env=None):
            if not self.optimize_memory_usage:
                return super().sample(batch_size=batch_size, env=env)
            # Do not sample the element with index `self.pos` as the transitions is invalid
            # (we use only one array to store `obs` and `next_obs`)
            if self.full:
                batch_inds = (np.random.randint(1, self.buffer_size, size=batch_size) + self.pos) % self.buffer_size
            else:
                batch_inds = np.random.randint(0, self.pos, size=batch_size)
            return self._get_samples(batch_inds, env=env)

        def _get_samples(self, batch_inds: np.ndarray, env=None):
            # Sample randomly the env idx
            env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))

            if self.optimize_memory_usage:
                next_obs = self._normalize_obs(self.observations[(batch_inds + 1) % self.buffer_size, env_indices, :], env)
            else:
                next_obs = self._normalize_obs(self.next_observations[batch_inds, env_indices, :], env)

            data = (
                self._normalize_obs(self.observations[batch_inds, env_indices, :], env),
                self.actions[batch_inds, env_indices, :],
                next_obs,
                # Only use dones that are not due to timeouts
                # deactivated by default (timeouts is initialized as an array of False)
                (self.dones[batch_inds, env_indices] * (1 - self.timeouts[batch_inds, env_indices])).reshape(-1, 1),
                self._normalize_reward(self.rewards[batch_inds, env_indices].reshape(-1, 1), env),
            )
            return ReplayBufferSamples(**dict(zip(("observations", "actions", "next_observations", "dones", "rewards"),
                                                  map(self.to_torch, data))))

        @staticmethod
        def _maybe_cast_dtype(dtype):
            if dtype == np.float64:
                return np.float32
            return dtype

    class RolloutBuffer(BaseBuffer):
        def __init__(self, buffer_size, observation_space, action_space, device="auto", gae_lambda: float = 1,
                     gamma: float = 0.99, n_envs: int = 1):
            super().__init__(buffer_size, observation_space, action_space, device, n_envs=n_envs)
            self.gae_lambda = gae_lambda
            self.gamma = gamma
            self.generator_ready = False
            self.reset()

        def reset(self) -> None:
            self.observations = np.zeros((self.buffer_size, self.n_envs, *self.obs_shape), dtype=np.float32)
            self.actions = np.zeros((self.buffer_size, self.n_envs, self.action_dim), dtype=np.float32)
            self.rewards = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
            self.returns = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
            self.episode_starts = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
            self.values = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
            self.log_probs = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
            self.advantages = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
            self.generator_ready = False
            super().reset()

        def compute_returns_and_advantage(self, last_values, dones: np.ndarray) -> None:
            # Convert to numpy
            last_values = last_values.clone().cpu().numpy().flatten()

            last_gae_lam = 0
            for step in reversed(range(self.buffer_size)):
                if step == self.buffer_size - 1:
                    next_non_terminal = 1.0 - dones.astype(np.float32)
                    next_values = last_values
                else:
                    next_non_terminal = 1.0 - self.episode_starts[step + 1]
                    next_values = self.values[step + 1]
                delta = self.rewards[step] + self.gamma * next_values * next_non_terminal - self.values[step]
                last_gae_lam = delta + self.gamma * self.gae_lambda * next_non_terminal * last_gae_lam
                self.advantages[step] = last_gae_lam
            # TD(lambda) estimator, see Github PR #375 or "Telescoping in TD(lambda)"
            # in David Silver Lecture 4: https://www.youtube.com/watch?v=PnHCvfgC_ZA
            self.returns = self.advantages + self.values

        def add(self, obs, action, reward, episode_start, value, log_prob) -> None:
            if len(log_prob.shape) == 0:
                # Reshape 0-d tensor to avoid error
                log_prob = log_prob.reshape(-1, 1)

            # Reshape needed when using multiple envs with discrete observations
            # as numpy cannot broadcast (n_discrete,) to (n_discrete, 1)
            if isinstance(self.observation_space, spaces.Discrete):
                obs = obs.reshape((self.n_envs, *self.obs_shape))

            # Reshape to handle multi-dim and discrete action spaces, see GH #970 #1392
            action = action.reshape((self.n_envs, self.action_dim))

            self.observations[self.pos] = np.array(obs)
            self.actions[self.pos] = np.array(action)
            self.rewards[self.pos] = np.array(reward)
            self.episode_starts[self.pos] = np.array(episode_start)
            self.values[self.pos] = value.clone().cpu().numpy().flatten()
            self.log_probs[self.pos] = log_prob.clone().cpu().numpy()
            self.pos += 1
            if self.pos == self.buffer_size:
                self.full = True

        def get(self, batch_size=None):
            assert self.full, ""
            indices = np.random.permutation(self.buffer_size * self.n_envs)
            # Prepare the data
            if not self.generator_ready:
                _tensor_names = [
                    "observations",
                    "actions",
                    "values",
                    "log_probs",
                    "advantages",
                    "returns",
                ]

                for tensor in _tensor_names:
                    self.__dict__[tensor] = self.swap_and_flatten(self.__dict__[tensor])
                self.generator_ready = True

            # Return everything, don't create minibatches
            if batch_size is None:
                batch_size = self.buffer_size * self.n_envs

            start_idx = 0
            while start_idx < self.buffer_size * self.n_envs:
                yield self._get_samples(indices[start_idx : start_idx + batch_size])
                start_idx += batch_size

        def _get_samples(self, batch_inds: np.ndarray, env=None):
            data = (
                self.observations[batch_inds],
                self.actions[batch_inds],
                self.values[batch_inds].flatten(),
                self.log_probs[batch_inds].flatten(),
                self.advantages[batch_inds].flatten(),
                self.returns[batch_inds].flatten(),
            )
            return RolloutBufferSamples(**dict(zip(("observations", "actions", "old_values", "old_log_prob",
                                                    "advantages", "returns"), map(self.to_torch, data))))

    # ---------------- off-policy networks (dqn/policies.py, sac/policies.py, td3/policies.py) ----------------
    class QNetwork(nn.Module):
        def __init__(self, observation_space, action_space, features_extractor, features_dim, net_arch=None,
                     activation_fn=nn.ReLU, normalize_images: bool = True) -> None:
            super().__init__()
            self.observation_space = observation_space
            self.normalize_images = normalize_images
            self.features_extractor = features_extractor
            if net_arch is None:
                net_arch = [64, 64]

            self.net_arch = net_arch
            self.activation_fn = activation_fn
            self.features_dim = features_dim
            action_dim = int(action_space.n)  # number of actions
            q_net = create_mlp(self.features_dim, action_dim, self.net_arch, self.activation_fn)
            self.q_net = nn.Sequential(*q_net)

        def extract_features(self, obs, features_extractor):
            preprocessed_obs = preprocess_obs(obs, self.observation_space, normalize_images=self.normalize_images)
            return features_extractor(preprocessed_obs)

        def forward(self, obs):
            return self.q_net(self.extract_features(obs, self.features_extractor))

    # CAP the standard deviation of the actor
    LOG_STD_MAX = 2
    LOG_STD_MIN = -20

    class SACActor(nn.Module):
        def __init__(self, observation_space, action_space, net_arch, features_extractor, features_dim,
                     activation_fn=nn.ReLU, normalize_images: bool = True):
            super().__init__()
            self.observation_space = observation_space
            self.normalize_images = normalize_images
            self.features_extractor = features_extractor
            self.net_arch = net_arch
            self.features_dim = features_dim
            self.activation_fn = activation_fn

            action_dim = get_action_dim(action_space)
            latent_pi_net = create_mlp(features_dim, -1, net_arch, activation_fn)
            self.latent_pi = nn.Sequential(*latent_pi_net)
            last_layer_dim = net_arch[-1] if len(net_arch) > 0 else features_dim

            self.action_dist = SquashedDiagGaussianDistribution(action_dim)
            self.mu = nn.Linear(last_layer_dim, action_dim)
            self.log_std = nn.Linear(last_layer_dim, action_dim)

        def extract_features(self, obs, features_extractor):
            preprocessed_obs = preprocess_obs(obs, self.observation_space, normalize_images=self.normalize_images)
            return features_extractor(preprocessed_obs)

        def get_action_dist_params(self, obs):
            features = self.extract_features(obs, self.features_extractor)
            latent_pi = self.latent_pi(features)
            mean_actions = self.mu(latent_pi)

            # Unstructured exploration (Original implementation)
            log_std = self.log_std(latent_pi)
            # Original Implementation to cap the standard deviation
            log_std = th.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)
            return mean_actions, log_std, {}

        def forward(self, obs, deterministic: bool = False):
            mean_actions, log_std, kwargs = self.get_action_dist_params(obs)
            # Note: the action is squashed
            return self.action_dist.actions_from_params(mean_actions, log_std, deterministic=deterministic, **kwargs)

        def action_log_prob(self, obs):
            mean_actions, log_std, kwargs = self.get_action_dist_params(obs)
            # return action and associated log prob
            return self.action_dist.log_prob_from_params(mean_actions, log_std, **kwargs)

    class TD3Actor(nn.Module):
        def __init__(self, observation_space, action_space, net_arch, features_extractor, features_dim,
                     activation_fn=nn.ReLU, normalize_images: bool = True):
            super().__init__()
            self.observation_space = observation_space
            self.normalize_images = normalize_images
            self.features_extractor = features_extractor
            self.net_arch = net_arch
            self.features_dim = features_dim
            self.activation_fn = activation_fn

            action_dim = get_action_dim(action_space)
            actor_net = create_mlp(features_dim, action_dim, net_arch, activation_fn, squash_output=True)
            # Deterministic action
            self.mu = nn.Sequential(*actor_net)

        def extract_features(self, obs, features_extractor):
            preprocessed_obs = preprocess_obs(obs, self.observation_space, normalize_images=self.normalize_images)
            return features_extractor(preprocessed_obs)

        def forward(self, obs):
            # assert deterministic, 'The TD3 actor only outputs deterministic actions'
            features = self.extract_features(obs, self.features_extractor)
            return self.mu(features)

    class ContinuousCritic(nn.Module):
        def __init__(self, observation_space, action_space, net_arch, features_extractor, features_dim,
                     activation_fn=nn.ReLU, normalize_images: bool = True, n_critics: int = 2,
                     share_features_extractor: bool = True):
            super().__init__()
            self.observation_space = observation_space
            self.normalize_images = normalize_images
            self.features_extractor = features_extractor
            action_dim = get_action_dim(action_space)

            self.share_features_extractor = share_features_extractor
            self.n_critics = n_critics
            self.q_networks = []
            for idx in range(n_critics):
                q_net_list = create_mlp(features_dim + action_dim, 1, net_arch, activation_fn)
                q_net = nn.Sequential(*q_net_list)
                self.add_module(f"qf{idx}", q_net)
                self.q_networks.append(q_net)

        def extract_features(self, obs, features_extractor):
            preprocessed_obs = preprocess_obs(obs, self.observation_space, normalize_images=self.normalize_images)
            return features_extractor(preprocessed_obs)

        def forward(self, obs, actions):
            # Learn the features extractor using the policy loss only
            # when the features_extractor is shared with the actor
            with th.set_grad_enabled(not self.share_features_extractor):
                features = self.extract_features(obs, self.features_extractor)
            qvalue_input = th.cat([features, actions], dim=1)
            return tuple(q_net(qvalue_input) for q_net in self.q_networks)

        def q1_forward(self, obs, actions):
            with th.no_grad():
                features = self.extract_features(obs, self.features_extractor)
            return self.q_networks[0](th.cat([features, actions], dim=1))

    return SimpleNamespace(**{k: v for k, v in locals().items() if not k.startswith("_") and k not in ("th",)})


# ----------------------------------------------------------------------------------------------
# The algorithms' train() bodies, on a stand-in object that carries the attributes they read.


class _Logger:
    def __init__(self):
        self.values = {}

    def record(self, key, value, exclude=None):
        self.values[key] = value


class _Algo:
    def __init__(self, th, **kwargs):
        self.th = th
        self.logger = _Logger()
        self._n_updates = 0
        self._current_progress_remaining = 1.0
        self._vec_normalize_env = None
        self.__dict__.update(kwargs)

    def _update_learning_rate(self, optimizers):
        if not isinstance(optimizers, list):
            optimizers = [optimizers]
        for optimizer in optimizers:
            self.S.update_learning_rate(optimizer, self.lr_schedule(self._current_progress_remaining))


class PPO(_Algo):
    def train(self) -> None:
        th, F, spaces_ = self.th, self.th.nn.functional, spaces
        explained_variance = self.S.explained_variance
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update optimizer learning rate
        self._update_learning_rate(self.policy.optimizer)
        # Compute current clip range
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        # Optional: clip range for the value function
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]

        entropy_losses = []
        pg_losses, value_losses = [], []
        clip_fractions = []

        continue_training = True
        # train for n_epochs epochs
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            # Do a complete pass on the rollout buffer
            for rollout_data in self.rollout_buffer.get(self.batch_size):
                actions = rollout_data.actions
                if isinstance(self.action_space, spaces_.Discrete):
                    # Convert discrete action from float to long
                    actions = rollout_data.actions.long().flatten()

                values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
                values = values.flatten()
                # Normalize advantage
                advantages = rollout_data.advantages
                # Normalization does not make sense if mini batchsize == 1, see GH issue #325
                if self.normalize_advantage and len(advantages) > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

                # ratio between old and new policy, should be one at the first iteration
                ratio = th.exp(log_prob - rollout_data.old_log_prob)

                # clipped surrogate loss
                policy_loss_1 = advantages * ratio
                policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()

                # Logging
                pg_losses.append(policy_loss.item())
                clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).float()).item()
                clip_fractions.append(clip_fraction)

                if self.clip_range_vf is None:
                    # No clipping
                    values_pred = values
                else:
                    # Clip the difference between old and new value
                    # NOTE: this depends on the reward scaling
                    values_pred = rollout_data.old_values + th.clamp(
                        values - rollout_data.old_values, -clip_range_vf, clip_range_vf
                    )
                # Value loss using the TD(gae_lambda) target
                value_loss = F.mse_loss(rollout_data.returns, values_pred)
                value_losses.append(value_loss.item())

                # Entropy loss favor exploration
                if entropy is None:
                    # Approximate entropy when no analytical form
                    entropy_loss = -th.mean(-log_prob)
                else:
                    entropy_loss = -th.mean(entropy)

                entropy_losses.append(entropy_loss.item())

                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

                # Calculate approximate form of reverse KL Divergence for early stopping
                # see issue #417: https://github.com/DLR-RM/stable-baselines3/issues/417
                # and discussion in PR #419: https://github.com/DLR-RM/stable-baselines3/pull/419
                # and Schulman blog: http://joschu.net/blog/kl-approx.html
                with th.no_grad():
                    log_ratio = log_prob - rollout_data.old_log_prob
                    approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
                    approx_kl_divs.append(approx_kl_div)

                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                    break

                # Optimization step
                self.policy.optimizer.zero_grad()
                loss.backward()
                # Clip grad norm
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()

            self._n_updates += 1
            if not continue_training:
                break

        explained_var = explained_variance(self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten())

        # Logs
        self.logger.record("train/entropy_loss", np.mean(entropy_losses))
        self.logger.record("train/policy_gradient_loss", np.mean(pg_losses))
        self.logger.record("train/value_loss", np.mean(value_losses))
        self.logger.record("train/approx_kl", np.mean(approx_kl_divs))
        self.logger.record("train/clip_fraction", np.mean(clip_fractions))
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if self.clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)


class A2C(_Algo):
    def train(self) -> None:
        th, F, spaces_ = self.th, self.th.nn.functional, spaces
        explained_variance = self.S.explained_variance
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)

        # Update optimizer learning rate
        self._update_learning_rate(self.policy.optimizer)

        # This will only loop once (get all data in one go)
        for rollout_data in self.rollout_buffer.get(batch_size=None):
            actions = rollout_data.actions
            if isinstance(self.action_space, spaces_.Discrete):
                # Convert discrete action from float to long
                actions = actions.long().flatten()

            values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
            values = values.flatten()

            # Normalize advantage (not present in the original implementation)
            advantages = rollout_data.advantages
            if self.normalize_advantage:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

            # Policy gradient loss
            policy_loss = -(advantages * log_prob).mean()

            # Value loss using the TD(gae_lambda) target
            value_loss = F.mse_loss(rollout_data.returns, values)

            # Entropy loss favor exploration
            if entropy is None:
                # Approximate entropy when no analytical form
                entropy_loss = -th.mean(-log_prob)
            else:
                entropy_loss = -th.mean(entropy)

            loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

            # Optimization step
            self.policy.optimizer.zero_grad()
            loss.backward()

            # Clip grad norm
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()

        explained_var = explained_variance(self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten())

        self._n_updates += 1
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/explained_variance", explained_var)
        self.logger.record("train/entropy_loss", entropy_loss.item())
        self.logger.record("train/policy_loss", policy_loss.item())
        self.logger.record("train/value_loss", value_loss.item())
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())


class DQN(_Algo):
    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        th, F = self.th, self.th.nn.functional
        # Switch to train mode (this affects batch norm / dropout)
        self.policy.set_training_mode(True)
        # Update learning rate according to schedule
        self._update_learning_rate(self.policy.optimizer)

        losses = []
        for _ in range(gradient_steps):
            # Sample replay buffer
            replay_data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)

            with th.no_grad():
                # Compute the next Q-values using the target network
                next_q_values = self.q_net_target(replay_data.next_observations)
                # Follow greedy policy: use the one with the highest value
                next_q_values, _ = next_q_values.max(dim=1)
                # Avoid potential broadcast issue
                next_q_values = next_q_values.reshape(-1, 1)
                # 1-step TD target
                target_q_values = replay_data.rewards + (1 - replay_data.dones) * self.gamma * next_q_values

            # Get current Q-values estimates
            current_q_values = self.q_net(replay_data.observations)

            # Retrieve the q-values for the actions from the replay buffer
            current_q_values = th.gather(current_q_values, dim=1, index=replay_data.actions.long())

            # Compute Huber loss (less sensitive to outliers)
            loss = F.smooth_l1_loss(current_q_values, target_q_values)
            losses.append(loss.item())

            # Optimize the policy
            self.policy.optimizer.zero_grad()
            loss.backward()
            # Clip gradient norm
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()

        # Increase update counter
        self._n_updates += gradient_steps

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))


class SAC(_Algo):
    def _setup_model(self) -> None:
        th = self.th
        # Running mean and running var
        self.batch_norm_stats = self.S.get_parameters_by_name(self.critic, ["running_"])
        self.batch_norm_stats_target = self.S.get_parameters_by_name(self.critic_target, ["running_"])
        # Target entropy is used when learning the entropy coefficient
        if self.target_entropy == "auto":
            # automatically set target entropy if needed
            self.target_entropy = -np.prod(self.action_space.shape).astype(np.float32)
        else:
            # Force conversion
            # this will also throw an error for unexpected string
            self.target_entropy = float(self.target_entropy)

        # The entropy coefficient or entropy can be learned automatically
        # see Automating Entropy Adjustment for Maximum Entropy RL section
        # of https://arxiv.org/abs/1812.05905
        self.ent_coef_optimizer = None
        if isinstance(self.ent_coef, str) and self.ent_coef.startswith("auto"):
            # Default initial value of ent_coef when learned
            init_value = 1.0
            if "_" in self.ent_coef:
                init_value = float(self.ent_coef.split("_")[1])
                assert init_value > 0.0, "The initial value of ent_coef must be greater than 0"

            # Note: we optimize the log of the entropy coeff which is slightly different from the paper
            # as discussed in https://github.com/rail-berkeley/softlearning/issues/37
            self.log_ent_coef = th.log(th.ones(1, device=self.device) * init_value).requires_grad_(True)
            self.ent_coef_optimizer = th.optim.Adam([self.log_ent_coef], lr=self.lr_schedule(1))
        else:
            # Force conversion to float
            # this will throw an error if a malformed string (different from 'auto')
            # is passed
            self.ent_coef_tensor = th.tensor(float(self.ent_coef), device=self.device)

    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        th, F = self.th, self.th.nn.functional
        polyak_update = self.S.polyak_update
        # Switch to train mode (this affects batch norm / dropout)
        self.actor.train(True)
        self.critic.train(True)
        # Update optimizers learning rate
        optimizers = [self.actor.optimizer, self.critic.optimizer]
        if self.ent_coef_optimizer is not None:
            optimizers += [self.ent_coef_optimizer]

        # Update learning rate according to lr schedule
        self._update_learning_rate(optimizers)

        ent_coef_losses, ent_coefs = [], []
        actor_losses, critic_losses = [], []

        for gradient_step in range(gradient_steps):
            # Sample replay buffer
            replay_data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)

            # Action by the current actor for the sampled state
            actions_pi, log_prob = self.actor.action_log_prob(replay_data.observations)
            log_prob = log_prob.reshape(-1, 1)

            ent_coef_loss = None
            if self.ent_coef_optimizer is not None:
                # Important: detach the variable from the graph
                # so we don't change it with other losses
                # see https://github.com/rail-berkeley/softlearning/issues/60
                ent_coef = th.exp(self.log_ent_coef.detach())
                ent_coef_loss = -(self.log_ent_coef * (log_prob + self.target_entropy).detach()).mean()
                ent_coef_losses.append(ent_coef_loss.item())
            else:
                ent_coef = self.ent_coef_tensor

            ent_coefs.append(ent_coef.item())

            # Optimize entropy coefficient, also called
            # entropy temperature or alpha in the paper
            if ent_coef_loss is not None:
                self.ent_coef_optimizer.zero_grad()
                ent_coef_loss.backward()
                self.ent_coef_optimizer.step()

            with th.no_grad():
                # Select action according to policy
                next_actions, next_log_prob = self.actor.action_log_prob(replay_data.next_observations)
                # Compute the next Q values: min over all critics targets
                next_q_values = th.cat(self.critic_target(replay_data.next_observations, next_actions), dim=1)
                next_q_values, _ = th.min(next_q_values, dim=1, keepdim=True)
                # add entropy term
                next_q_values = next_q_values - ent_coef * next_log_prob.reshape(-1, 1)
                # td error + entropy term
                target_q_values = replay_data.rewards + (1 - replay_data.dones) * self.gamma * next_q_values

            # Get current Q-values estimates for each critic network
            # using action from the replay buffer
            current_q_values = self.critic(replay_data.observations, replay_data.actions)

            # Compute critic loss
            critic_loss = 0.5 * sum(F.mse_loss(current_q, target_q_values) for current_q in current_q_values)
            critic_losses.append(critic_loss.item())

            # Optimize the critic
            self.critic.optimizer.zero_grad()
            critic_loss.backward()
            self.critic.optimizer.step()

            # Compute actor loss
            # Alternative: actor_loss = th.mean(log_prob - qf1_pi)
            # Min over all critic networks
            q_values_pi = th.cat(self.critic(replay_data.observations, actions_pi), dim=1)
            min_qf_pi, _ = th.min(q_values_pi, dim=1, keepdim=True)
            actor_loss = (ent_coef * log_prob - min_qf_pi).mean()
            actor_losses.append(actor_loss.item())

            # Optimize the actor
            self.actor.optimizer.zero_grad()
            actor_loss.backward()
            self.actor.optimizer.step()

            # Update target networks
            if gradient_step % self.target_update_interval == 0:
                polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
                # Copy running stats, see GH issue #996
                polyak_update(self.batch_norm_stats, self.batch_norm_stats_target, 1.0)

        self._n_updates += gradient_steps

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/ent_coef", np.mean(ent_coefs))
        self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))
        if len(ent_coef_losses) > 0:
            self.logger.record("train/ent_coef_loss", np.mean(ent_coef_losses))


class TD3(_Algo):
    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        th, F = self.th, self.th.nn.functional
        polyak_update = self.S.polyak_update
        # Switch to train mode (this affects batch norm / dropout)
        self.actor.train(True)
        self.critic.train(True)

        # Update learning rate according to lr schedule
        self._update_learning_rate([self.actor.optimizer, self.critic.optimizer])

        actor_losses, critic_losses = [], []

        for _ in range(gradient_steps):

            self._n_updates += 1
            # Sample replay buffer
            replay_data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)

            with th.no_grad():
                # Select action according to policy and add clipped noise
                noise = replay_data.actions.clone().data.normal_(0, self.target_policy_noise)
                noise = noise.clamp(-self.target_noise_clip, self.target_noise_clip)
                next_actions = (self.actor_target(replay_data.next_observations) + noise).clamp(-1, 1)

                # Compute the next Q-values: min over all critics targets
                next_q_values = th.cat(self.critic_target(replay_data.next_observations, next_actions), dim=1)
                next_q_values, _ = th.min(next_q_values, dim=1, keepdim=True)
                target_q_values = replay_data.rewards + (1 - replay_data.dones) * self.gamma * next_q_values

            # Get current Q-values estimates for each critic network
            current_q_values = self.critic(replay_data.observations, replay_data.actions)

            # Compute critic loss
            critic_loss = sum([F.mse_loss(current_q, target_q_values) for current_q in current_q_values])
            critic_losses.append(critic_loss.item())

            # Optimize the critics
            self.critic.optimizer.zero_grad()
            critic_loss.backward()
            self.critic.optimizer.step()

            # Delayed policy updates
            if self._n_updates % self.policy_delay == 0:
                # Compute actor loss
                actor_loss = -self.critic.q1_forward(replay_data.observations, self.actor(replay_data.observations)).mean()
                actor_losses.append(actor_loss.item())

                # Optimize the actor
                self.actor.optimizer.zero_grad()
                actor_loss.backward()
                self.actor.optimizer.step()

                polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
                polyak_update(self.actor.parameters(), self.actor_target.parameters(), self.tau)

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if len(actor_losses) > 0:
            self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))


# ----------------------------------------------------------------------------------------------
# NumPy helpers.

LOG2PI = np.log(2 * np.pi)


def _np(t):
    return np.array(t.detach().cpu().numpy(), dtype=np.float64)


def _dev(th):
    return th.empty(0).device


def _t(th, a, dtype=None):
    t = th.as_tensor(np.asarray(a)).to(_dev(th))
    return t if dtype is None else t.to(dtype)


def _fd_grad(f, x0, h=1e-6):
    g = np.zeros_like(x0)
    for i in np.ndindex(x0.shape):
        xp, xm = x0.copy(), x0.copy()
        xp[i] += h
        xm[i] -= h
        g[i] = (f(xp) - f(xm)) / (2 * h)
    return g


def _params(module):
    return {k: _np(v) for k, v in module.named_parameters()}


def _np_seq(seq, x, prefix="", P=None):
    """NumPy forward of an nn.Sequential of Linear/Tanh/ReLU/Flatten, with weights from ``P`` (by name) or the module."""
    for name, m in seq.named_children():
        kind = type(m).__name__
        if kind == "Linear":
            W = P[prefix + name + ".weight"] if P is not None else _np(m.weight)
            x = x @ W.T
            if m.bias is not None:
                x = x + (P[prefix + name + ".bias"] if P is not None else _np(m.bias))
        elif kind == "Tanh":
            x = np.tanh(x)
        elif kind == "ReLU":
            x = np.maximum(x, 0)
        elif kind == "Flatten":
            x = x.reshape(len(x), -1)
        else:
            raise AssertionError(kind)
    return x


def _np_conv(x, w, b, stride):
    k = w.shape[-1]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", win, w) + b[None, :, None, None]


def _np_normal_logpdf(x, mu, sd):
    return -0.5 * ((x - mu) / sd) ** 2 - np.log(sd) - 0.5 * LOG2PI


def _np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _np_gae(rewards, values, episode_starts, last_values, dones, gamma, lam):
    """GAE as the explicit sum A_t = sum_l (prod_{t<=j<l} gamma*lam*nonterminal_j) delta_l."""
    T, E = rewards.shape
    nonterm = np.ones((T, E))
    nonterm[:-1] = 1 - episode_starts[1:]
    nonterm[-1] = 1 - dones
    nextv = np.vstack([values[1:], last_values[None]])
    delta = rewards + gamma * nextv * nonterm - values
    adv = np.zeros((T, E))
    for e in range(E):
        for t in range(T):
            s, coef = 0.0, 1.0
            for l in range(t, T):
                s += coef * delta[l, e]
                if nonterm[l, e] == 0:
                    break
                coef *= gamma * lam
            adv[t, e] = s
    return adv


def _load(th, module, P):
    with th.no_grad():
        for k, p in module.named_parameters():
            p.copy_(_t(th, P[k], p.dtype))


def _clip(g, max_norm):
    norm = np.sqrt(sum((v ** 2).sum() for v in g.values()))
    coef = max_norm / (norm + 1e-6)
    return {k: v * min(coef, 1.0) for k, v in g.items()}


def _flat_fd(loss, P, keys, h=1e-6):
    """Finite-difference gradient of loss(P) for every parameter in ``keys``."""
    G = {}
    for k in keys:
        def f(x, k=k):
            Q = dict(P)
            Q[k] = x
            return loss(Q)
        G[k] = _fd_grad(f, P[k], h)
    return G


# ----------------------------------------------------------------------------------------------
# distributions.py


def _dist_checks(th, S, rng):
    """Run the distributions on fixed data; return the numbers to compare."""
    out = {}
    mean = rng.normal(size=(4, 2))
    log_std = np.array([-0.3, 0.4])
    acts = rng.normal(size=(4, 2))
    d = S.DiagGaussianDistribution(2)
    d.proba_distribution(_t(th, mean), _t(th, log_std))
    out["diag_lp"] = _np(d.log_prob(_t(th, acts)))
    out["diag_ent"] = _np(d.entropy())
    out["diag_mode"] = _np(d.mode())
    m = _t(th, mean).requires_grad_(True)
    s = S.DiagGaussianDistribution(2).actions_from_params(m, _t(th, log_std))
    s.sum().backward()
    out["diag_dsample_dmean"] = _np(m.grad)
    a, lp = S.DiagGaussianDistribution(2).log_prob_from_params(_t(th, mean), _t(th, log_std))
    out["diag_sample_lp"] = (_np(a), _np(lp))
    # squashed
    sq = S.SquashedDiagGaussianDistribution(2)
    sq.proba_distribution(_t(th, mean), _t(th, log_std))
    sacts = np.tanh(acts)
    out["sq_lp"] = _np(sq.log_prob(_t(th, sacts)))
    edge = np.array([[1.0, -1.0], [0.5, 0.999999]], dtype=np.float32)
    sq32 = S.SquashedDiagGaussianDistribution(2)
    sq32.proba_distribution(_t(th, mean[:2], th.float32), _t(th, log_std, th.float32))
    out["sq_edge_lp"] = _np(sq32.log_prob(_t(th, edge)))
    out["sq_inverse_edge"] = _np(S.TanhBijector.inverse(_t(th, edge)))
    a, lp = S.SquashedDiagGaussianDistribution(2).log_prob_from_params(_t(th, mean), _t(th, log_std))
    out["sq_sample"] = (_np(a), _np(lp))
    out["sq_entropy_is_none"] = sq.entropy() is None
    out["sq_mode"] = _np(sq.mode())
    # categorical
    logits = rng.normal(size=(5, 3))
    cat = S.make_proba_distribution(Discrete(3))
    cat.proba_distribution(_t(th, logits))
    ca = np.array([0, 2, 1, 1, 0])
    out["cat_lp"] = _np(cat.log_prob(_t(th, ca)))
    out["cat_ent"] = _np(cat.entropy())
    out["cat_mode"] = _np(cat.mode())
    cat2 = S.CategoricalDistribution(3).proba_distribution(_t(th, logits[::-1].copy()))
    out["cat_kl"] = _np(S.kl_divergence(cat, cat2))
    big = S.CategoricalDistribution(3).proba_distribution(_t(th, np.tile(logits[:1], (4000, 1))))
    out["cat_freq"] = np.bincount(_np(big.sample()).astype(int), minlength=3) / 4000.0
    # multi-categorical: split of the logits by the tuple of NumPy ints of nvec
    mlog = rng.normal(size=(5, 9))
    mc = S.make_proba_distribution(MultiDiscrete([3, 2, 4]))
    mc.proba_distribution(_t(th, mlog))
    ma = np.array([[0, 1, 3], [2, 0, 0], [1, 1, 2], [0, 0, 1], [2, 1, 3]])
    out["mc_lp"] = _np(mc.log_prob(_t(th, ma)))
    out["mc_ent"] = _np(mc.entropy())
    out["mc_mode"] = _np(mc.mode())
    out["mc_sample_shape"] = tuple(mc.sample().shape)
    mc2 = S.MultiCategoricalDistribution(np.array([3, 2, 4])).proba_distribution(_t(th, mlog[::-1].copy()))
    out["mc_kl"] = _np(S.kl_divergence(mc, mc2))
    # bernoulli
    blog = rng.normal(size=(4, 3))
    be = S.make_proba_distribution(MultiBinary(3))
    be.proba_distribution(_t(th, blog))
    ba = (rng.uniform(size=(4, 3)) > 0.5).astype(np.float64)
    out["be_lp"] = _np(be.log_prob(_t(th, ba)))
    out["be_ent"] = _np(be.entropy())
    out["be_mode"] = _np(be.mode())
    out["kinds"] = [type(S.make_proba_distribution(sp, use_sde=u)).__name__ for sp, u in (
        (Box(-1, 1, (2,)), False), (Box(-1, 1, (2,)), True), (Discrete(2), False),
        (MultiDiscrete([2, 2]), False), (MultiBinary(2), False))]
    return out, dict(mean=mean, log_std=log_std, acts=acts, sacts=sacts, edge=edge, logits=logits, ca=ca,
                     mlog=mlog, ma=ma, blog=blog, ba=ba)


def test_sb3_distributions_against_closed_forms():
    S = sb3(lucid)
    out, d = _dist_checks(lucid, S, np.random.default_rng(0))
    mean, log_std, acts = d["mean"], d["log_std"], d["acts"]
    sd = np.exp(log_std)
    np.testing.assert_allclose(out["diag_lp"], _np_normal_logpdf(acts, mean, sd).sum(1), rtol=1e-10)
    np.testing.assert_allclose(out["diag_ent"], np.full(4, (0.5 + 0.5 * LOG2PI + log_std).sum()), rtol=1e-10)
    np.testing.assert_array_equal(out["diag_mode"], mean)
    np.testing.assert_array_equal(out["diag_dsample_dmean"], np.ones((4, 2)))  # reparametrised sample
    a, lp = out["diag_sample_lp"]
    np.testing.assert_allclose(lp, _np_normal_logpdf(a, mean, sd).sum(1), rtol=1e-10)
    # squashed: Gaussian log-prob of atanh(a) minus sum log(1 - a^2 + 1e-6)
    g = np.arctanh(np.clip(d["sacts"], -1 + np.finfo(np.float64).eps, 1 - np.finfo(np.float64).eps))
    want = _np_normal_logpdf(g, mean, sd).sum(1) - np.log(1 - d["sacts"] ** 2 + 1e-6).sum(1)
    np.testing.assert_allclose(out["sq_lp"], want, rtol=1e-8)
    e32 = np.finfo(np.float32).eps
    np.testing.assert_allclose(out["sq_inverse_edge"], np.arctanh(np.clip(d["edge"].astype(np.float64), -1 + e32, 1 - e32)),
                               rtol=2e-3)
    assert np.isfinite(out["sq_edge_lp"]).all()
    a, lp = out["sq_sample"]
    assert np.all(np.abs(a) < 1)
    ga = np.arctanh(a)
    np.testing.assert_allclose(lp, _np_normal_logpdf(ga, mean, sd).sum(1) - np.log(1 - a ** 2 + 1e-6).sum(1), rtol=1e-5)
    assert out["sq_entropy_is_none"]
    np.testing.assert_allclose(out["sq_mode"], np.tanh(mean), rtol=1e-12)
    # categorical
    ls = _np_log_softmax(d["logits"])
    np.testing.assert_allclose(out["cat_lp"], ls[np.arange(5), d["ca"]], rtol=1e-10)
    np.testing.assert_allclose(out["cat_ent"], -(np.exp(ls) * ls).sum(1), rtol=1e-10)
    np.testing.assert_array_equal(out["cat_mode"], d["logits"].argmax(1))
    ls2 = _np_log_softmax(d["logits"][::-1])
    np.testing.assert_allclose(out["cat_kl"], (np.exp(ls) * (ls - ls2)).sum(1), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out["cat_freq"], np.exp(ls[0]), atol=0.04)
    # multi-categorical
    parts = np.split(d["mlog"], [3, 5], axis=1)
    lss = [_np_log_softmax(p) for p in parts]
    np.testing.assert_allclose(out["mc_lp"], sum(l[np.arange(5), d["ma"][:, i]] for i, l in enumerate(lss)), rtol=1e-10)
    np.testing.assert_allclose(out["mc_ent"], sum(-(np.exp(l) * l).sum(1) for l in lss), rtol=1e-10)
    np.testing.assert_array_equal(out["mc_mode"], np.stack([p.argmax(1) for p in parts], 1))
    assert out["mc_sample_shape"] == (5, 3)
    lss2 = [_np_log_softmax(p) for p in np.split(d["mlog"][::-1], [3, 5], axis=1)]
    np.testing.assert_allclose(out["mc_kl"], sum((np.exp(l) * (l - m)).sum(1) for l, m in zip(lss, lss2)), rtol=1e-9)
    # bernoulli
    p = 1 / (1 + np.exp(-d["blog"]))
    ba = d["ba"]
    np.testing.assert_allclose(out["be_lp"], (ba * np.log(p) + (1 - ba) * np.log(1 - p)).sum(1), rtol=1e-9)
    np.testing.assert_allclose(out["be_ent"], -(p * np.log(p) + (1 - p) * np.log(1 - p)).sum(1), rtol=1e-9)
    np.testing.assert_array_equal(out["be_mode"], np.round(p))
    assert out["kinds"] == ["DiagGaussianDistribution", "StateDependentNoiseDistribution", "CategoricalDistribution",
                            "MultiCategoricalDistribution", "BernoulliDistribution"]
    with pytest.raises(NotImplementedError, match="not implemented for action space"):
        S.make_proba_distribution(object())


def _gsde(th, S, rng, dtype):
    out = {}
    d = S.StateDependentNoiseDistribution(2, full_std=True, use_expln=True)
    net, log_std = d.proba_distribution_net(latent_dim=4, log_std_init=-2.0)
    out["init"] = (_np(log_std), tuple(d.exploration_mat.shape), tuple(d.exploration_matrices.shape),
                   net.in_features, net.out_features)
    ls = rng.uniform(-1.5, 1.5, size=(4, 2))
    log_std = th.nn.Parameter(_t(th, ls, dtype))
    out["std"] = _np(d.get_std(log_std))
    d.sample_weights(log_std, batch_size=3)
    out["mats"] = (_np(d.exploration_mat), _np(d.exploration_matrices))
    latent = rng.normal(size=(3, 4))
    mean = rng.normal(size=(3, 2))
    acts = rng.normal(size=(3, 2))
    d.proba_distribution(_t(th, mean, dtype), log_std, _t(th, latent, dtype))
    out["lp"] = _np(d.log_prob(_t(th, acts, dtype)))
    out["ent"] = _np(d.entropy())
    out["sample_bmm"] = _np(d.sample())
    out["mode"] = _np(d.mode())
    d.proba_distribution(_t(th, mean[:2], dtype), log_std, _t(th, latent[:2], dtype))
    out["sample_mm"] = _np(d.sample())
    big = S.StateDependentNoiseDistribution(2, full_std=True)
    big.latent_sde_dim = 4
    big.sample_weights(_t(th, ls), batch_size=3000)
    out["big_z"] = _np(big.exploration_matrices) / np.exp(ls)
    # full_std=False: one std per feature, broadcast over the actions
    d2 = S.StateDependentNoiseDistribution(2, full_std=False)
    _, ls2 = d2.proba_distribution_net(latent_dim=4, log_std_init=-0.5)
    out["not_full"] = (tuple(ls2.shape), _np(d2.get_std(ls2)))
    # squashed gSDE
    d3 = S.StateDependentNoiseDistribution(2, squash_output=True)
    d3.proba_distribution_net(latent_dim=4)
    d3.proba_distribution(_t(th, mean, dtype), _t(th, ls, dtype), _t(th, latent, dtype))
    out["sq_lp"] = _np(d3.log_prob(_t(th, np.tanh(acts), dtype)))
    out["sq_ent_none"] = d3.entropy() is None
    out["sq_mode"] = _np(d3.mode())
    # gradient of the log-prob with respect to log_std (latent is detached: learn_features=False)
    lsg = _t(th, ls, th.float64).requires_grad_(True)
    lat = _t(th, latent, th.float64).requires_grad_(True)
    d4 = S.StateDependentNoiseDistribution(2, use_expln=True)
    d4.proba_distribution(_t(th, mean, th.float64), lsg, lat)
    d4.log_prob(_t(th, acts, th.float64)).sum().backward()
    out["grad"] = (_np(lsg.grad), lat.grad is None)
    return out, dict(ls=ls, latent=latent, mean=mean, acts=acts)


def _np_expln(ls, eps=1e-6):
    return np.where(ls <= 0, np.exp(ls), np.log1p(np.where(ls > 0, ls, 0) + eps) + 1.0)


def _np_gsde_lp(ls, latent, mean, acts, expln=True, squash=False):
    std = _np_expln(ls) if expln else np.exp(ls)
    sd = np.sqrt((latent ** 2) @ (std ** 2) + 1e-6)
    if squash:
        g = np.arctanh(np.clip(acts, -1 + np.finfo(np.float64).eps, 1 - np.finfo(np.float64).eps))
        return _np_normal_logpdf(g, mean, sd).sum(1) - np.log(1 - np.tanh(g) ** 2 + 1e-6).sum(1), sd
    return _np_normal_logpdf(acts, mean, sd).sum(1), sd


def test_sb3_gsde_against_numpy():
    S = sb3(lucid)
    out, d = _gsde(lucid, S, np.random.default_rng(1), lucid.float64)
    ls, latent, mean, acts = d["ls"], d["latent"], d["mean"], d["acts"]
    init, emshape, emsshape, fin, fout = out["init"]
    np.testing.assert_array_equal(init, np.full((4, 2), -2.0))
    assert emshape == (4, 2) and emsshape == (1, 4, 2) and (fin, fout) == (4, 2)
    np.testing.assert_allclose(out["std"], _np_expln(ls), rtol=1e-6)
    lp, sd = _np_gsde_lp(ls, latent, mean, acts)
    np.testing.assert_allclose(out["lp"], lp, rtol=1e-6)
    np.testing.assert_allclose(out["ent"], (0.5 + 0.5 * LOG2PI + np.log(sd)).sum(1), rtol=1e-6)
    M, Ms = out["mats"]
    np.testing.assert_allclose(out["sample_bmm"], mean + np.einsum("bf,bfa->ba", latent, Ms), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["sample_mm"], mean[:2] + latent[:2] @ M, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["mode"], mean, rtol=1e-12)
    z = out["big_z"]
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03
    shape, std2 = out["not_full"]
    assert shape == (4, 1)
    np.testing.assert_allclose(std2, np.full((4, 2), np.exp(-0.5)), rtol=1e-6)
    lp3, _ = _np_gsde_lp(ls, latent, mean, np.tanh(acts), expln=False, squash=True)
    np.testing.assert_allclose(out["sq_lp"], lp3, rtol=1e-5)
    assert out["sq_ent_none"]
    np.testing.assert_allclose(out["sq_mode"], np.tanh(mean), rtol=1e-12)
    grad, no_latent_grad = out["grad"]
    fd = _fd_grad(lambda x: _np_gsde_lp(x, latent, mean, acts)[0].sum(), ls)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)
    assert no_latent_grad


def test_sb3_distributions_torch_parity():
    torch = pytest.importorskip("torch")
    (oL, _), (oT, _) = (_dist_checks(lucid, sb3(lucid), np.random.default_rng(0)),
                        _dist_checks(torch, sb3(torch), np.random.default_rng(0)))
    for k in oL:
        if k in ("diag_sample_lp", "sq_sample", "cat_freq"):
            continue  # random draws differ between the libraries
        if k in ("kinds", "sq_entropy_is_none", "mc_sample_shape"):
            assert oL[k] == oT[k], k
        else:
            # sq_edge_lp is float32 at a = 0.999999, where log(1 - a**2 + 1e-6) loses digits
            tol = 2e-5 if k in ("sq_edge_lp", "sq_inverse_edge") else 1e-6
            np.testing.assert_allclose(oL[k], oT[k], rtol=tol, atol=1e-6, err_msg=k)
    gL, _ = _gsde(lucid, sb3(lucid), np.random.default_rng(1), lucid.float64)
    gT, _ = _gsde(torch, sb3(torch), np.random.default_rng(1), torch.float64)
    for k in ("std", "lp", "ent", "mode", "sq_lp", "sq_mode"):
        np.testing.assert_allclose(gL[k], gT[k], rtol=1e-6, atol=1e-7, err_msg=k)
    np.testing.assert_allclose(gL["grad"][0], gT["grad"][0], rtol=1e-9)
    assert gL["grad"][1] and gT["grad"][1]


# ----------------------------------------------------------------------------------------------
# torch_layers.py and policies.py


def _ortho_residual(w, gain):
    W = w.reshape(w.shape[0], -1)
    G = W @ W.T if W.shape[0] <= W.shape[1] else W.T @ W
    return np.abs(G - gain ** 2 * np.eye(len(G))).max()


def _layers(th, S):
    nn = th.nn
    out = {}
    out["mlp_kinds"] = [
        [type(m).__name__ for m in S.create_mlp(3, 2, [4, 5], nn.Tanh, squash_output=True)],
        [type(m).__name__ for m in S.create_mlp(3, -1, [4])],
        [type(m).__name__ for m in S.create_mlp(3, 2, [])],
        [m.bias is None for m in S.create_mlp(3, 2, [4], with_bias=False) if type(m).__name__ == "Linear"],
    ]
    th.manual_seed(0)
    ext = S.MlpExtractor(3, dict(pi=[4], vf=[5, 2]), nn.Tanh, device=_dev(th))
    x = np.random.default_rng(2).normal(size=(6, 3)).astype(np.float32)
    lp, lv = ext(_t(th, x))
    out["mlp_extractor"] = (ext.latent_dim_pi, ext.latent_dim_vf, _np(lp), _np(lv),
                            _np_seq(ext.policy_net, x.astype(np.float64)), _np_seq(ext.value_net, x.astype(np.float64)))
    ident = S.MlpExtractor(3, [], nn.Tanh, device=_dev(th))
    out["identity"] = (ident.latent_dim_pi, _np(ident.forward_actor(_t(th, x))), x)
    fl = S.FlattenExtractor(Box(-1, 1, (2, 3)))
    out["flatten"] = (fl.features_dim, tuple(fl(_t(th, np.zeros((4, 2, 3), np.float32))).shape))
    return out


def test_sb3_torch_layers_against_numpy():
    out = _layers(lucid, sb3(lucid))
    assert out["mlp_kinds"] == [["Linear", "Tanh", "Linear", "Tanh", "Linear", "Tanh"], ["Linear", "ReLU"], ["Linear"], [True, True]]
    dpi, dvf, lp, lv, wp, wv = out["mlp_extractor"]
    assert (dpi, dvf) == (4, 2)
    np.testing.assert_allclose(lp, wp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lv, wv, rtol=1e-5, atol=1e-6)
    d, got, x = out["identity"]
    assert d == 3
    np.testing.assert_array_equal(got, x)
    assert out["flatten"] == (6, (4, 6))


def _cnn_policy(th, S, seed):
    th.manual_seed(seed)
    obs_space = Box(0, 255, (1, 36, 36), dtype=np.uint8, seed=seed)
    pol = S.ActorCriticPolicy(obs_space, Discrete(3), S.constant_fn(1e-3), features_extractor_class=S.NatureCNN,
                              features_extractor_kwargs=dict(features_dim=8), device=_dev(th))
    return pol, obs_space


def _np_cnn_policy(P, obs):
    x = obs.astype(np.float64) / 255.0
    for i, s in ((0, 4), (2, 2), (4, 1)):
        x = np.maximum(_np_conv(x, P[f"features_extractor.cnn.{i}.weight"], P[f"features_extractor.cnn.{i}.bias"], s), 0)
    x = x.reshape(len(x), -1)
    f = np.maximum(x @ P["features_extractor.linear.0.weight"].T + P["features_extractor.linear.0.bias"], 0)
    logits = f @ P["action_net.weight"].T + P["action_net.bias"]
    values = f @ P["value_net.weight"].T + P["value_net.bias"]
    return logits, values


def test_sb3_nature_cnn_actor_critic_policy_against_numpy():
    S = sb3(lucid)
    pol, obs_space = _cnn_policy(lucid, S, 0)
    P = _params(pol)
    # NatureCNN at 36x36: 8x8 -> 3x3 -> 1x1 feature maps, 64 flattened features
    assert P["features_extractor.linear.0.weight"].shape == (8, 64) and pol.mlp_extractor.latent_dim_pi == 8
    gains = {"features_extractor": np.sqrt(2), "action_net": 0.01, "value_net": 1.0}
    for k, v in P.items():
        if k.endswith("weight"):
            assert _ortho_residual(v, gains[k.split(".")[0]]) < 1e-5, k
        else:
            assert np.all(v == 0), k
    obs = np.stack([obs_space.sample() for _ in range(3)])
    logits, values = _np_cnn_policy(P, obs)
    a, v, lp = pol(S.obs_as_tensor(obs, pol.device), deterministic=True)
    np.testing.assert_array_equal(_np(a), logits.argmax(1))
    np.testing.assert_allclose(_np(v), values, rtol=1e-4, atol=1e-6)
    ls = _np_log_softmax(logits)
    np.testing.assert_allclose(_np(lp), ls[np.arange(3), logits.argmax(1)], rtol=1e-5)
    acts = np.array([2, 0, 1])
    v2, lp2, ent = pol.evaluate_actions(S.obs_as_tensor(obs, pol.device), S.obs_as_tensor(acts, pol.device))
    np.testing.assert_allclose(_np(lp2), ls[np.arange(3), acts], rtol=1e-5)
    np.testing.assert_allclose(_np(ent), -(np.exp(ls) * ls).sum(1), rtol=1e-5)
    np.testing.assert_allclose(_np(pol.predict_values(S.obs_as_tensor(obs, pol.device))), values, rtol=1e-4, atol=1e-6)
    act, state = pol.predict(obs[0], deterministic=True)
    assert act.shape == () and act == logits[0].argmax() and state is None
    assert not pol.training


def _sde_policy(th, S, seed):
    th.manual_seed(seed)
    pol = S.ActorCriticPolicy(Box(-1, 1, (3,)), Box(-0.5, 0.5, (2,)), S.constant_fn(1e-3), net_arch=[4], use_sde=True,
                              log_std_init=-1.0, device=_dev(th))
    return pol


def test_sb3_gsde_policy_and_mlp_policy_against_numpy():
    S = sb3(lucid)
    pol = _sde_policy(lucid, S, 0)
    P = _params(pol)
    assert P["log_std"].shape == (4, 2) and np.all(P["log_std"] == -1.0)
    assert _ortho_residual(P["mlp_extractor.policy_net.0.weight"], np.sqrt(2)) < 1e-5
    obs = np.random.default_rng(3).uniform(-1, 1, (5, 3)).astype(np.float32)
    pol.reset_noise(n_envs=5)
    assert tuple(pol.action_dist.exploration_matrices.shape) == (5, 4, 2)
    a, v, lp = pol(S.obs_as_tensor(obs, pol.device))
    latent = np.tanh(obs @ P["mlp_extractor.policy_net.0.weight"].T + P["mlp_extractor.policy_net.0.bias"])
    mean = latent @ P["action_net.weight"].T + P["action_net.bias"]
    lvf = np.tanh(obs @ P["mlp_extractor.value_net.0.weight"].T + P["mlp_extractor.value_net.0.bias"])
    np.testing.assert_allclose(_np(v), lvf @ P["value_net.weight"].T + P["value_net.bias"], rtol=1e-5, atol=1e-6)
    Ms = _np(pol.action_dist.exploration_matrices)
    want_a = mean + np.einsum("bf,bfa->ba", latent, Ms)
    np.testing.assert_allclose(_np(a), want_a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(lp), _np_gsde_lp(P["log_std"], latent, mean, want_a, expln=False)[0], rtol=1e-4)
    # predict clips to the Box bounds; one observation gives one action of the space's shape
    pa, _ = pol.predict(obs * 50, deterministic=False)
    assert pa.shape == (5, 2) and np.all(np.abs(pa) <= 0.5)
    pa1, _ = pol.predict(obs[0], deterministic=True)
    np.testing.assert_allclose(pa1, np.clip(mean[0], -0.5, 0.5), rtol=1e-4, atol=1e-6)


def test_sb3_discrete_observation_policy_one_hot():
    S = sb3(lucid)
    lucid.manual_seed(0)
    pol = S.ActorCriticPolicy(Discrete(4), Discrete(2), S.constant_fn(1e-3), net_arch=[3], device=_dev(lucid))
    assert pol.features_dim == 4
    P = _params(pol)
    obs = np.array([3, 0, 2])
    v = _np(pol.predict_values(S.obs_as_tensor(obs, pol.device)))
    x = np.eye(4)[obs]
    h = np.tanh(x @ P[_VF + "weight"].T + P[_VF + "bias"])
    np.testing.assert_allclose(v, h @ P["value_net.weight"].T + P["value_net.bias"], rtol=1e-5, atol=1e-7)
    hp = np.tanh(x @ P[_PI + "weight"].T + P[_PI + "bias"])
    logits = hp @ P["action_net.weight"].T + P["action_net.bias"]
    a, _ = pol.predict(np.array(2), deterministic=True)
    assert a.shape == () and a == logits[2].argmax()
    a3, _ = pol.predict(obs, deterministic=True)
    np.testing.assert_array_equal(a3, logits.argmax(1))

def test_sb3_policies_torch_parity():
    torch = pytest.importorskip("torch")
    oL, oT = _layers(lucid, sb3(lucid)), _layers(torch, sb3(torch))
    assert oL["mlp_kinds"] == oT["mlp_kinds"] and oL["flatten"] == oT["flatten"]
    for SL, ST, build in ((sb3(lucid), sb3(torch), _cnn_policy),):
        pL, space = build(lucid, SL, 0)
        pT, _ = build(torch, ST, 0)
        _load(torch, pT, _params(pL))
        obs = np.stack([space.sample() for _ in range(3)])
        for name in ("forward", "evaluate"):
            if name == "forward":
                rL = pL(SL.obs_as_tensor(obs, pL.device), deterministic=True)
                rT = pT(ST.obs_as_tensor(obs, pT.device), deterministic=True)
            else:
                acts = np.array([2, 0, 1])
                rL = pL.evaluate_actions(SL.obs_as_tensor(obs, pL.device), SL.obs_as_tensor(acts, pL.device))
                rT = pT.evaluate_actions(ST.obs_as_tensor(obs, pT.device), ST.obs_as_tensor(acts, pT.device))
            for x, y in zip(rL, rT):
                np.testing.assert_allclose(_np(x), _np(y), rtol=1e-5, atol=1e-6, err_msg=name)
    # orthogonal init: both libraries give orthogonal matrices of the same gains (their draws differ)
    pT, _ = _cnn_policy(torch, ST, 0)
    for k, v in _params(pT).items():
        if k.endswith("weight"):
            g = {"features_extractor": np.sqrt(2), "action_net": 0.01, "value_net": 1.0}[k.split(".")[0]]
            assert _ortho_residual(v, g) < 1e-5


# ----------------------------------------------------------------------------------------------
# buffers.py and utils.py


def _rollout_data(seed, T=6, E=2):
    rng = np.random.default_rng(seed)
    return dict(
        obs=rng.uniform(-1, 1, (T, E, 3)).astype(np.float32),
        acts=rng.normal(size=(T, E, 2)).astype(np.float32),
        rewards=rng.normal(size=(T, E)).astype(np.float32),
        starts=np.array([[1, 1], [0, 0], [0, 1], [1, 0], [0, 0], [0, 1]], dtype=np.float32)[:T],
        off_v=rng.normal(0, 0.3, (T, E, 1)).astype(np.float32),
        off_lp=rng.normal(0, 0.4, (T, E)).astype(np.float32),
        last_obs=rng.uniform(-1, 1, (E, 3)).astype(np.float32),
        dones=np.array([0, 1][:E]),
    )


def _fill_rollout(th, S, pol, data, gamma=0.95, lam=0.9):
    T, E = data["rewards"].shape
    buf = S.RolloutBuffer(T, pol.observation_space, pol.action_space, device=_dev(th), gae_lambda=lam, gamma=gamma, n_envs=E)
    for t in range(T):
        acts = data["acts"][t]
        if isinstance(pol.action_space, Discrete):
            acts = (np.abs(acts[:, 0]) * 10).astype(np.int64) % pol.action_space.n
        with th.no_grad():
            a = S.obs_as_tensor(acts, pol.device)
            values, log_prob, _ = pol.evaluate_actions(S.obs_as_tensor(data["obs"][t], pol.device), a)
        buf.add(data["obs"][t], acts, data["rewards"][t], data["starts"][t],
                values + _t(th, data["off_v"][t]), log_prob + _t(th, data["off_lp"][t]))
    with th.no_grad():
        last_values = pol.predict_values(S.obs_as_tensor(data["last_obs"], pol.device))
    buf.compute_returns_and_advantage(last_values=last_values, dones=data["dones"])
    return buf, _np(last_values).ravel()


def _mlp_policy(th, S, seed, action_space, optimizer_class, lr, **kw):
    th.manual_seed(seed)
    return S.ActorCriticPolicy(Box(-1, 1, (3,)), action_space, S.constant_fn(lr), net_arch=dict(pi=[5], vf=[4]),
                               optimizer_class=optimizer_class, device=_dev(th), **kw)


def test_sb3_rollout_buffer_gae_against_numpy_sum():
    S = sb3(lucid)
    pol = _mlp_policy(lucid, S, 0, Box(-1, 1, (2,)), lucid.optim.SGD, 0.1)
    data = _rollout_data(0)
    buf, last_values = _fill_rollout(lucid, S, pol, data)
    adv = _np_gae(buf.rewards.astype(np.float64), buf.values.astype(np.float64), buf.episode_starts, last_values,
                  data["dones"], 0.95, 0.9)
    np.testing.assert_allclose(buf.advantages, adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(buf.returns, adv + buf.values, rtol=1e-5, atol=1e-6)
    # gae_lambda = 1: returns are discounted rewards to the episode's end, bootstrapped at the cut
    buf1, _ = _fill_rollout(lucid, S, pol, data, gamma=0.95, lam=1.0)
    ret = np.zeros((6, 2))
    for e in range(2):
        nxt = 0.0 if data["dones"][e] else last_values[e]
        for t in reversed(range(6)):
            if t < 5 and buf1.episode_starts[t + 1, e]:
                nxt = 0.0
            nxt = buf1.rewards[t, e] + 0.95 * nxt
            ret[t, e] = nxt
    np.testing.assert_allclose(buf1.returns, ret, rtol=1e-5, atol=1e-5)
    # get(): swap_and_flatten to (steps*envs, ...) in env-major order, minibatches of a permutation
    np.random.seed(0)
    perm = np.random.permutation(12)
    np.random.seed(0)
    batches = list(buf.get(5))
    assert [len(b.observations) for b in batches] == [5, 5, 2]
    flat_obs = data["obs"].swapaxes(0, 1).reshape(12, 3)
    np.testing.assert_array_equal(np.concatenate([_np(b.observations) for b in batches]), flat_obs[perm])
    np.testing.assert_allclose(np.concatenate([_np(b.advantages) for b in batches]), adv.swapaxes(0, 1).reshape(12)[perm],
                               rtol=1e-5, atol=1e-6)
    assert batches[0].old_values.dtype == lucid.float32 and tuple(batches[0].actions.shape) == (5, 2)


def test_sb3_replay_buffer_and_utils():
    S = sb3(lucid)
    rng = np.random.default_rng(4)
    rb = S.ReplayBuffer(10, Box(-1, 1, (3,)), Box(-1, 1, (2,), dtype=np.float64), device=_dev(lucid), n_envs=2)
    assert rb.buffer_size == 5 and rb.actions.dtype == np.float32
    rows = []
    for i in range(7):
        row = (rng.normal(size=(2, 3)), rng.normal(size=(2, 3)), rng.normal(size=(2, 2)), rng.normal(size=2),
               np.array([i % 3 == 0, i % 2 == 0]), [{"TimeLimit.truncated": i == 6}, {}])
        rb.add(*row)
        rows.append(row)
    assert rb.full and rb.pos == 2 and rb.size() == 5
    np.testing.assert_allclose(rb.observations[1], rows[6][0], rtol=1e-6)  # slot 1 overwritten by the 7th add
    np.random.seed(5)
    bi = np.random.randint(0, 5, size=8)
    ei = np.random.randint(0, 2, size=(8,))
    np.random.seed(5)
    s = rb.sample(8)
    slot_row = {0: 5, 1: 6, 2: 2, 3: 3, 4: 4}
    want_obs = np.stack([rows[slot_row[b]][0][e] for b, e in zip(bi, ei)])
    want_done = np.array([float(rows[slot_row[b]][4][e]) * (1 - float(slot_row[b] == 6 and e == 0)) for b, e in zip(bi, ei)])
    np.testing.assert_allclose(_np(s.observations), want_obs, rtol=1e-6)
    np.testing.assert_array_equal(_np(s.dones).ravel(), want_done)
    assert tuple(s.rewards.shape) == (8, 1) and s.actions.dtype == lucid.float32
    # optimize_memory_usage: one array holds obs and next_obs; the slot at pos is never sampled
    mb = S.ReplayBuffer(5, Box(-1, 1, (3,)), Box(-1, 1, (2,)), device=_dev(lucid), optimize_memory_usage=True,
                        handle_timeout_termination=False)
    for i in range(7):
        mb.add(np.full((1, 3), i, np.float32), np.full((1, 3), i + 1, np.float32), np.zeros((1, 2)), np.zeros(1),
               np.zeros(1), [{}])
    assert mb.full and mb.pos == 2 and not hasattr(mb, "next_observations")
    np.random.seed(6)
    want = (np.random.randint(1, 5, size=30) + 2) % 5
    np.random.seed(6)
    ms = mb.sample(30)
    stored = {0: 5, 1: 6, 2: 7, 3: 3, 4: 4}  # slot 2 holds the next observation written by the 7th add
    np.testing.assert_array_equal(_np(ms.observations)[:, 0], [stored[b] for b in want])
    np.testing.assert_array_equal(_np(ms.next_observations)[:, 0], [stored[b] + 1 for b in want])
    assert 2 not in set(want)
    with pytest.raises(ValueError, match="optimize_memory_usage"):
        S.ReplayBuffer(4, Box(-1, 1, (3,)), Box(-1, 1, (2,)), device=_dev(lucid), optimize_memory_usage=True)
    # utils
    y = rng.normal(size=50)
    yp = y + rng.normal(0, 0.1, 50)
    assert np.isclose(S.explained_variance(yp, y), 1 - np.var(y - yp) / np.var(y))
    assert np.isnan(S.explained_variance(yp, np.ones(50)))
    f = S.get_linear_fn(1.0, 0.1, 0.5)
    assert [f(1.0), f(0.75), f(0.2)] == [1.0, pytest.approx(0.55), 0.1]
    assert S.get_schedule_fn(3)(0.3) == 3.0 and S.get_schedule_fn(f) is f
    with pytest.raises(ValueError, match="different lengths"):
        list(S.zip_strict([1, 2], [1]))
    opt = lucid.optim.SGD(lucid.nn.Linear(3, 2).parameters(), lr=0.1)
    S.update_learning_rate(opt, 0.03)
    assert opt.param_groups[0]["lr"] == 0.03
    d = S.obs_as_tensor({"a": np.ones(2, np.float32), "b": np.zeros((1, 2))}, _dev(lucid))
    assert d["a"].dtype == lucid.float32 and d["b"].dtype == lucid.float64
    with pytest.raises(Exception, match="Unrecognized type"):
        S.obs_as_tensor([1, 2], _dev(lucid))


# ----------------------------------------------------------------------------------------------
# PPO and A2C train(): one update recomputed in float64 NumPy


_PI, _VF = "mlp_extractor.policy_net.0.", "mlp_extractor.value_net.0."


def _np_ac_forward(P, obs):
    hp = np.tanh(obs @ P[_PI + "weight"].T + P[_PI + "bias"])
    out = hp @ P["action_net.weight"].T + P["action_net.bias"]
    hv = np.tanh(obs @ P[_VF + "weight"].T + P[_VF + "bias"])
    return out, (hv @ P["value_net.weight"].T + P["value_net.bias"]).ravel()


def _buffer_arrays(buf):
    f = lambda a: np.asarray(a, dtype=np.float64).reshape(buf.buffer_size * buf.n_envs, -1)  # noqa: E731
    return dict(obs=f(buf.observations), acts=f(buf.actions), old_v=f(buf.values).ravel(), old_lp=f(buf.log_probs).ravel(),
                adv=f(buf.advantages).ravel(), ret=f(buf.returns).ravel())


def _np_ppo_loss(P, D, clip=0.2, clip_vf=0.1, ent_coef=0.01, vf_coef=0.5, out=None):
    mean, v = _np_ac_forward(P, D["obs"])
    lp = _np_normal_logpdf(D["acts"], mean, np.exp(P["log_std"])).sum(1)
    ent = np.full(len(lp), (0.5 + 0.5 * LOG2PI + P["log_std"]).sum())
    adv = (D["adv"] - D["adv"].mean()) / (D["adv"].std(ddof=1) + 1e-8)
    ratio = np.exp(lp - D["old_lp"])
    pl = -np.minimum(adv * ratio, adv * np.clip(ratio, 1 - clip, 1 + clip)).mean()
    vpred = v if clip_vf is None else D["old_v"] + np.clip(v - D["old_v"], -clip_vf, clip_vf)
    vl = ((D["ret"] - vpred) ** 2).mean()
    el = -ent.mean()
    if out is not None:
        lr_ = lp - D["old_lp"]
        out.update(pl=pl, vl=vl, el=el, kl=np.mean(np.exp(lr_) - 1 - lr_), cf=np.mean(np.abs(ratio - 1) > clip),
                   vclipped=np.mean(np.abs(v - D["old_v"]) > clip_vf) if clip_vf else 0.0)
    return pl + ent_coef * el + vf_coef * vl


def _ppo(th, S, seed, optimizer_class, lr, n_epochs=1, batch_size=12, clip_range_vf=0.1):
    pol = _mlp_policy(th, S, seed, Box(-1, 1, (2,)), optimizer_class, lr, log_std_init=-0.3)
    buf, _ = _fill_rollout(th, S, pol, _rollout_data(seed))
    algo = PPO(th, S=S, policy=pol, rollout_buffer=buf, action_space=pol.action_space, lr_schedule=S.constant_fn(lr),
               clip_range=S.get_schedule_fn(0.2), clip_range_vf=None if clip_range_vf is None else S.get_schedule_fn(clip_range_vf),
               n_epochs=n_epochs, batch_size=batch_size, normalize_advantage=True, ent_coef=0.01, vf_coef=0.5,
               max_grad_norm=0.3, target_kl=None, verbose=0)
    return algo


def _sgd_expected(P, loss, lr, max_norm, keys):
    G = _clip(_flat_fd(loss, P, keys), max_norm)
    return {k: P[k] - lr * G[k] for k in keys}


def test_sb3_ppo_train_one_update_against_numpy():
    S = sb3(lucid)
    algo = _ppo(lucid, S, 0, lucid.optim.SGD, 0.5)
    P, D = _params(algo.policy), _buffer_arrays(algo.rollout_buffer)
    logged = {}
    _np_ppo_loss(P, D, out=logged)
    assert 0 < logged["cf"] < 1 and 0 < logged["vclipped"] < 1  # both clippings are active on some samples
    want = _sgd_expected(P, lambda Q: _np_ppo_loss(Q, D), 0.5, 0.3, list(P))
    np.random.seed(0)
    algo.train()
    got = _params(algo.policy)
    for k in P:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=2e-5, err_msg=k)
    L = algo.logger.values
    for key, k in (("policy_gradient_loss", "pl"), ("value_loss", "vl"), ("entropy_loss", "el"), ("approx_kl", "kl"),
                   ("clip_fraction", "cf")):
        np.testing.assert_allclose(L["train/" + key], logged[k], rtol=1e-4, atol=1e-6, err_msg=key)
    assert L["train/n_updates"] == 1 and L["train/clip_range"] == 0.2 and L["train/clip_range_vf"] == 0.1
    np.testing.assert_allclose(L["train/std"], np.exp(got["log_std"]).mean(), rtol=1e-6)


def test_sb3_ppo_adam_epochs_improve_surrogate_and_value_fit():
    S = sb3(lucid)
    algo = _ppo(lucid, S, 1, lucid.optim.Adam, 3e-3, n_epochs=8, batch_size=4, clip_range_vf=None)
    D = _buffer_arrays(algo.rollout_buffer)
    before = {}
    _np_ppo_loss(_params(algo.policy), D, clip_vf=None, out=before)
    np.random.seed(1)
    algo.train()
    after = {}
    _np_ppo_loss(_params(algo.policy), D, clip_vf=None, out=after)
    assert algo.logger.values["train/n_updates"] == 8
    assert after["pl"] < before["pl"] - 0.02  # the clipped surrogate improves on the fixed advantages
    assert after["vl"] < 0.8 * before["vl"]


def test_sb3_ppo_target_kl_early_stopping_prints_and_skips_the_step(capsys):
    S = sb3(lucid)
    algo = _ppo(lucid, S, 0, lucid.optim.SGD, 0.5, n_epochs=3)
    algo.target_kl, algo.verbose = 1e-4, 1
    P, D = _params(algo.policy), _buffer_arrays(algo.rollout_buffer)
    logged = {}
    _np_ppo_loss(P, D, out=logged)
    assert logged["kl"] > 1.5e-4
    np.random.seed(0)
    algo.train()
    assert capsys.readouterr().out == f"Early stopping at step 0 due to reaching max kl: {logged['kl']:.2f}\n"
    for k, v in _params(algo.policy).items():
        np.testing.assert_array_equal(v, P[k])  # no optimizer step was taken
    assert algo.logger.values["train/n_updates"] == 1
    np.testing.assert_allclose(algo.logger.values["train/approx_kl"], logged["kl"], rtol=1e-4)

def _np_a2c_loss(P, D, ent_coef=0.05, vf_coef=0.5, out=None):
    logits, v = _np_ac_forward(P, D["obs"])
    ls = _np_log_softmax(logits)
    a = D["acts"].ravel().astype(int)
    lp = ls[np.arange(len(a)), a]
    pl = -(D["adv"] * lp).mean()
    vl = ((D["ret"] - v) ** 2).mean()
    el = -(-(np.exp(ls) * ls).sum(1)).mean()
    if out is not None:
        out.update(pl=pl, vl=vl, el=el)
    return pl + ent_coef * el + vf_coef * vl


def _a2c(th, S, seed, lr):
    pol = _mlp_policy(th, S, seed, Discrete(3), th.optim.RMSprop, lr, optimizer_kwargs=dict(alpha=0.99, eps=1e-5, weight_decay=0))
    buf, _ = _fill_rollout(th, S, pol, _rollout_data(seed + 10))
    return A2C(th, S=S, policy=pol, rollout_buffer=buf, action_space=pol.action_space, lr_schedule=S.constant_fn(lr),
               normalize_advantage=False, ent_coef=0.05, vf_coef=0.5, max_grad_norm=0.5)


def test_sb3_a2c_train_rmsprop_step_against_numpy_and_value_loss_drops():
    S = sb3(lucid)
    algo = _a2c(lucid, S, 0, 0.01)
    P, D = _params(algo.policy), _buffer_arrays(algo.rollout_buffer)
    assert set(np.unique(D["acts"])) <= {0.0, 1.0, 2.0} and len(np.unique(D["acts"])) > 1
    logged = {}
    _np_a2c_loss(P, D, out=logged)
    G = _clip(_flat_fd(lambda Q: _np_a2c_loss(Q, D), P, list(P)), 0.5)
    np.random.seed(0)
    algo.train()
    got = _params(algo.policy)
    for k in P:  # RMSprop's first step: lr * g / (sqrt((1 - alpha) * g**2) + eps)
        want = P[k] - 0.01 * G[k] / (np.sqrt(0.01 * G[k] ** 2) + 1e-5)
        np.testing.assert_allclose(got[k], want, rtol=1e-3, atol=2e-5, err_msg=k)
    L = algo.logger.values
    for key, k in (("policy_loss", "pl"), ("value_loss", "vl"), ("entropy_loss", "el")):
        np.testing.assert_allclose(L["train/" + key], logged[k], rtol=1e-4, atol=1e-6, err_msg=key)
    first = L["train/value_loss"]
    for _ in range(24):
        algo.train()
    assert algo.logger.values["train/value_loss"] < 0.3 * first
    assert algo.logger.values["train/n_updates"] == 25


def test_sb3_ppo_a2c_torch_parity():
    torch = pytest.importorskip("torch")
    names = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs", "advantages", "returns")
    for build, args in ((_ppo, (0, "SGD", 0.5)), (_ppo, (1, "Adam", 3e-3)), (_a2c, (0, 0.01))):
        res = []
        for th in (lucid, torch):
            S = sb3(th)
            if build is _ppo:
                algo = build(th, S, args[0], getattr(th.optim, args[1]), args[2], n_epochs=2, batch_size=5)
            else:
                algo = build(th, S, *args)
            if th is torch:  # the same weights and rollout as Lucid's
                _load(torch, algo.policy, P0)
                for n in names:
                    setattr(algo.rollout_buffer, n, getattr(buf0, n).copy())
            else:
                P0, buf0 = _params(algo.policy), algo.rollout_buffer
                buf0 = SimpleNamespace(**{n: getattr(buf0, n).copy() for n in names})
            np.random.seed(7)
            algo.train()
            res.append((_params(algo.policy), dict(algo.logger.values)))
        (PL, LL), (PT, LT) = res
        for k in PL:
            np.testing.assert_allclose(PL[k], PT[k], rtol=1e-4, atol=1e-5, err_msg=f"{build.__name__} {args} {k}")
        for k in LL:
            np.testing.assert_allclose(LL[k], LT[k], rtol=1e-4, atol=1e-6, err_msg=f"{build.__name__} {args} {k}")


# ----------------------------------------------------------------------------------------------
# Off-policy: DQN, SAC, TD3 train() on a fixed synthetic replay buffer


def _replay(th, S, seed, action_space, n=24, all_done=False):
    rng = np.random.default_rng(seed)
    obs_space = Box(-1, 1, (3,))
    rb = S.ReplayBuffer(n, obs_space, action_space, device=_dev(th), n_envs=1)
    for i in range(n):
        obs = rng.uniform(-1, 1, (1, 3))
        if isinstance(action_space, Discrete):
            act = np.array([[rng.integers(0, action_space.n)]])
            reward = np.array([obs[0, 0] * (act[0, 0] - 1.0) + 0.5])
        else:
            act = rng.uniform(-1, 1, (1, 2))
            reward = np.array([-((act - 0.5 * obs[:, :2]) ** 2).sum()])
        done = np.array([True if all_done else bool(rng.uniform() < 0.3)])
        rb.add(obs, rng.uniform(-1, 1, (1, 3)), act, reward, done, [{}])
    return rb, obs_space


def _replay_batch(rb, batch_size):
    """The indices ReplayBuffer.sample draws (the caller seeds np.random the same way)."""
    bi = np.random.randint(0, rb.buffer_size if rb.full else rb.pos, size=batch_size)
    np.random.randint(0, high=rb.n_envs, size=(batch_size,))
    f = lambda a: a[bi, 0].astype(np.float64)  # noqa: E731
    return dict(obs=f(rb.observations), next_obs=f(rb.next_observations), acts=f(rb.actions), r=f(rb.rewards)[:, None],
                d=f(rb.dones)[:, None])


def _dqn(th, S, seed, lr=0.2):
    th.manual_seed(seed)
    rb, obs_space = _replay(th, S, seed, Discrete(3))
    q = S.QNetwork(obs_space, Discrete(3), S.FlattenExtractor(obs_space), 3, net_arch=[6])
    qt = S.QNetwork(obs_space, Discrete(3), S.FlattenExtractor(obs_space), 3, net_arch=[6])
    qt.load_state_dict(q.state_dict())
    policy = th.nn.Module()
    policy.q_net, policy.q_net_target = q, qt
    policy.set_training_mode = policy.train
    policy.optimizer = th.optim.SGD(q.parameters(), lr=lr)
    return DQN(th, S=S, policy=policy, q_net=q, q_net_target=qt, replay_buffer=rb, gamma=0.9, max_grad_norm=0.5,
               lr_schedule=S.constant_fn(lr))


def _np_dqn_loss(P, T, B):
    def q(Q, x):
        return np.maximum(x @ Q["q_net.0.weight"].T + Q["q_net.0.bias"], 0) @ Q["q_net.2.weight"].T + Q["q_net.2.bias"]

    target = B["r"] + (1 - B["d"]) * 0.9 * q(T, B["next_obs"]).max(1, keepdims=True)
    cur = np.take_along_axis(q(P, B["obs"]), B["acts"].astype(int), 1)
    d = np.abs(cur - target)
    return np.where(d < 1, 0.5 * d ** 2, d - 0.5).mean()


def test_sb3_dqn_train_step_against_numpy_and_loss_drops():
    S = sb3(lucid)
    algo = _dqn(lucid, S, 0)
    P, T = _params(algo.q_net), _params(algo.q_net_target)
    np.random.seed(3)
    B = _replay_batch(algo.replay_buffer, 16)
    loss0 = _np_dqn_loss(P, T, B)
    want = _sgd_expected(P, lambda Q: _np_dqn_loss(Q, T, B), 0.2, 0.5, list(P))
    np.random.seed(3)
    algo.train(gradient_steps=1, batch_size=16)
    np.testing.assert_allclose(algo.logger.values["train/loss"], loss0, rtol=1e-5)
    got = _params(algo.q_net)
    for k in P:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-6, err_msg=k)
    for k, v in _params(algo.q_net_target).items():
        np.testing.assert_array_equal(v, T[k])  # the target network is not trained
    losses = []
    for _ in range(40):
        algo.train(gradient_steps=1, batch_size=24)
        losses.append(algo.logger.values["train/loss"])
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert algo.logger.values["train/n_updates"] == 41


def _sac(th, S, seed, lr=3e-3):
    th.manual_seed(seed)
    act_space = Box(-1, 1, (2,))
    rb, obs_space = _replay(th, S, seed, act_space, all_done=True)
    fe = S.FlattenExtractor(obs_space)
    actor = S.SACActor(obs_space, act_space, [8], fe, 3)
    critic = S.ContinuousCritic(obs_space, act_space, [8], fe, 3)
    critic_target = S.ContinuousCritic(obs_space, act_space, [8], S.FlattenExtractor(obs_space), 3)
    critic_target.load_state_dict(critic.state_dict())
    actor.optimizer = th.optim.Adam(actor.parameters(), lr=lr)
    critic.optimizer = th.optim.Adam(critic.parameters(), lr=lr)
    algo = SAC(th, S=S, actor=actor, critic=critic, critic_target=critic_target, replay_buffer=rb, action_space=act_space,
               lr_schedule=S.constant_fn(lr), ent_coef="auto_0.5", target_entropy="auto", gamma=0.9, tau=0.05,
               target_update_interval=1, device=_dev(th))
    algo._setup_model()
    return algo


def _np_twin_q(P, prefix, obs, acts, n=2):
    x = np.concatenate([obs, acts], 1)
    return [np.maximum(x @ P[f"{prefix}qf{i}.0.weight"].T + P[f"{prefix}qf{i}.0.bias"], 0) @ P[f"{prefix}qf{i}.2.weight"].T
            + P[f"{prefix}qf{i}.2.bias"] for i in range(n)]


def test_sb3_sac_train_step_ent_coef_tuning_and_critic_loss_drops():
    S = sb3(lucid)
    algo = _sac(lucid, S, 0, lr=1e-2)
    assert algo.target_entropy == -2.0 and algo.target_entropy.dtype == np.float32
    C, CT = _params(algo.critic), _params(algo.critic_target)
    np.random.seed(4)
    B = _replay_batch(algo.replay_buffer, 16)
    assert np.all(B["d"] == 1)  # the target is the reward: the critic loss needs no sample of the actor
    q = _np_twin_q(C, "", B["obs"], B["acts"])
    closs = 0.5 * sum(((qi - B["r"]) ** 2).mean() for qi in q)
    np.random.seed(4)
    algo.train(gradient_steps=1, batch_size=16)
    L = algo.logger.values
    np.testing.assert_allclose(L["train/critic_loss"], closs, rtol=1e-5)
    np.testing.assert_allclose(L["train/ent_coef"], 0.5, rtol=1e-6)
    # ent_coef_loss = -(log_ent_coef * (log_prob + target_entropy)).mean(): its gradient is loss / log(0.5),
    # and Adam's first step moves log_ent_coef by lr * g / (|g| + 1e-8)
    g = L["train/ent_coef_loss"] / np.log(0.5)
    np.testing.assert_allclose(_np(algo.log_ent_coef), [np.log(0.5) - 1e-2 * g / (abs(g) + 1e-8)], rtol=1e-6)
    C1 = _params(algo.critic)
    for k, v in _params(algo.critic_target).items():  # Polyak update with tau = 0.05
        np.testing.assert_allclose(v, 0.95 * CT[k] + 0.05 * C1[k], rtol=1e-5, atol=1e-7, err_msg=k)
    before = _np_fit(algo.critic, algo.replay_buffer)
    algo.train(gradient_steps=80, batch_size=24)
    assert _np_fit(algo.critic, algo.replay_buffer) < 0.3 * before
    assert algo.logger.values["train/n_updates"] == 81


def _np_fit(critic, rb):
    """Both critics' mean squared error to the rewards over the whole (all-terminal) buffer."""
    assert np.all(rb.dones == 1)
    r = rb.rewards[:, :1].astype(np.float64)
    q = _np_twin_q(_params(critic), "", rb.observations[:, 0].astype(np.float64), rb.actions[:, 0].astype(np.float64))
    return sum(((qi - r) ** 2).mean() for qi in q)


def _td3(th, S, seed, noise=0.0, lr=1e-2, all_done=False):
    th.manual_seed(seed)
    act_space = Box(-1, 1, (2,))
    rb, obs_space = _replay(th, S, seed, act_space, all_done=all_done)
    mk = lambda cls: cls(obs_space, act_space, [8], S.FlattenExtractor(obs_space), 3)  # noqa: E731
    actor, actor_target, critic, critic_target = mk(S.TD3Actor), mk(S.TD3Actor), mk(S.ContinuousCritic), mk(S.ContinuousCritic)
    actor_target.load_state_dict(actor.state_dict())
    critic_target.load_state_dict(critic.state_dict())
    actor.optimizer = th.optim.Adam(actor.parameters(), lr=lr)
    critic.optimizer = th.optim.Adam(critic.parameters(), lr=lr)
    return TD3(th, S=S, actor=actor, actor_target=actor_target, critic=critic, critic_target=critic_target, replay_buffer=rb,
               lr_schedule=S.constant_fn(lr), gamma=0.9, tau=0.1, policy_delay=2, target_policy_noise=noise,
               target_noise_clip=0.5)


def _np_td3_actor(P, obs):
    return np.tanh(np.maximum(obs @ P["mu.0.weight"].T + P["mu.0.bias"], 0) @ P["mu.2.weight"].T + P["mu.2.bias"])


def test_sb3_td3_smoothed_target_delayed_actor_and_polyak():
    S = sb3(lucid)
    algo = _td3(lucid, S, 0)
    A, AT, C, CT = (_params(m) for m in (algo.actor, algo.actor_target, algo.critic, algo.critic_target))
    np.random.seed(5)
    B1, B2 = _replay_batch(algo.replay_buffer, 16), _replay_batch(algo.replay_buffer, 16)
    assert 0 < B1["d"].mean() < 1
    na = np.clip(_np_td3_actor(AT, B1["next_obs"]), -1, 1)  # target_policy_noise = 0: normal_(0, 0) adds zeros
    target = B1["r"] + (1 - B1["d"]) * 0.9 * np.minimum(*_np_twin_q(CT, "", B1["next_obs"], na))
    closs = sum(((qi - target) ** 2).mean() for qi in _np_twin_q(C, "", B1["obs"], B1["acts"]))
    np.random.seed(5)
    algo.train(gradient_steps=1, batch_size=16)
    np.testing.assert_allclose(algo.logger.values["train/critic_loss"], closs, rtol=1e-5)
    assert "train/actor_loss" not in algo.logger.values  # the actor waits for policy_delay = 2
    for k, v in _params(algo.actor).items():
        np.testing.assert_array_equal(v, A[k])
    for k, v in _params(algo.critic_target).items():
        np.testing.assert_array_equal(v, CT[k])
    algo.train(gradient_steps=1, batch_size=16)
    C2 = _params(algo.critic)
    aloss = -_np_twin_q(C2, "", B2["obs"], _np_td3_actor(A, B2["obs"]), n=1)[0].mean()
    np.testing.assert_allclose(algo.logger.values["train/actor_loss"], aloss, rtol=1e-5)
    A2 = _params(algo.actor)
    assert max(np.abs(A2[k] - A[k]).max() for k in A) > 1e-3
    for k, v in _params(algo.critic_target).items():
        np.testing.assert_allclose(v, 0.9 * CT[k] + 0.1 * C2[k], rtol=1e-5, atol=1e-7, err_msg=k)
    for k, v in _params(algo.actor_target).items():
        np.testing.assert_allclose(v, 0.9 * AT[k] + 0.1 * A2[k], rtol=1e-5, atol=1e-7, err_msg=k)
    assert algo.logger.values["train/n_updates"] == 2
    # the smoothing noise line: a fresh normal draw of the actions' shape, the actions left alone, clamped
    acts = lucid.zeros(4000, 2)
    noise = acts.clone().data.normal_(0, 0.2).clamp(-0.5, 0.5)
    n = _np(noise)
    assert abs(n.std() - 0.2) < 0.01 and abs(n.mean()) < 0.01 and np.abs(n).max() <= 0.5 and np.all(_np(acts) == 0)
    # with smoothing noise on, the critics fit an all-terminal buffer: their error drops by half
    algo = _td3(lucid, S, 1, noise=0.2, all_done=True)
    before = _np_fit(algo.critic, algo.replay_buffer)
    algo.train(gradient_steps=40, batch_size=24)
    assert _np_fit(algo.critic, algo.replay_buffer) < 0.5 * before
    assert len(algo.logger.values) == 3 and algo.logger.values["train/n_updates"] == 40


def test_sb3_polyak_update_against_numpy():
    S = sb3(lucid)
    lucid.manual_seed(0)
    net, tgt = lucid.nn.Linear(3, 2), lucid.nn.Linear(3, 2)
    P0, T0 = _params(net), _params(tgt)
    S.polyak_update(net.parameters(), tgt.parameters(), 0.2)
    for k in P0:
        np.testing.assert_allclose(_params(tgt)[k], 0.8 * T0[k] + 0.2 * P0[k], rtol=1e-6)
    assert all(p.requires_grad and p.grad_fn is None for p in tgt.parameters())
    S.polyak_update(net.parameters(), tgt.parameters(), 1.0)
    for k in P0:
        np.testing.assert_array_equal(_params(tgt)[k], P0[k])
    with pytest.raises(ValueError):
        S.polyak_update(net.parameters(), list(tgt.parameters())[:1], 0.5)
    # SAC's copy of BatchNorm running statistics (GH #996): state_dict() entries share the buffers' storage
    bn, bn_t = lucid.nn.BatchNorm1d(3), lucid.nn.BatchNorm1d(3)
    x = np.random.default_rng(0).normal(2.0, 3.0, (16, 3)).astype(np.float32)
    bn(_t(lucid, x))
    stats, stats_t = S.get_parameters_by_name(bn, ["running_"]), S.get_parameters_by_name(bn_t, ["running_"])
    assert len(stats) == 2
    S.polyak_update(stats, stats_t, 1.0)
    np.testing.assert_allclose(_np(bn_t.running_mean), 0.9 * 0 + 0.1 * x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(_np(bn_t.running_var), 0.9 * 1 + 0.1 * x.var(0, ddof=1), rtol=1e-5)


def test_tensor_eq_with_a_foreign_object_is_not_an_error():
    t = lucid.ones(2)
    sentinel = object()
    assert (t == sentinel) is False and (t != sentinel) is True
    assert sentinel not in (t, lucid.zeros(2))  # SB3's zip_strict
    S = sb3(lucid)
    a, b = lucid.nn.Linear(2, 2), lucid.nn.Linear(2, 2)
    S.polyak_update(a.parameters(), b.parameters(), 1.0)
    np.testing.assert_array_equal(_np(b.weight), _np(a.weight))
    with pytest.raises(TypeError):
        t < sentinel  # noqa: B015


def test_sb3_dqn_torch_parity():
    torch = pytest.importorskip("torch")
    _off_policy_parity(torch, (("dqn", _dqn, 3),))


def test_sb3_sac_td3_torch_parity():
    torch = pytest.importorskip("torch")
    _off_policy_parity(torch, (("td3", _td3, 2), ("sac", _sac, 1)))


def _off_policy_parity(torch, cases):
    # DQN and TD3 (no smoothing noise) are deterministic given the seeded replay draws; SAC's critic step too
    for name, build, steps in cases:
        res = []
        for th in (lucid, torch):
            S = sb3(th)
            algo = build(th, S, 0)
            mods = [m for m in ("q_net", "q_net_target", "actor", "actor_target", "critic", "critic_target") if hasattr(algo, m)]
            if th is lucid:
                P0 = {m: _params(getattr(algo, m)) for m in mods}
            else:
                for m in mods:
                    _load(torch, getattr(algo, m), P0[m])
            np.random.seed(9)
            logs = []
            for _ in range(steps):
                algo.train(gradient_steps=1, batch_size=16)
                logs.append(algo.logger.values.get("train/loss", algo.logger.values.get("train/critic_loss")))
            keep = ("critic",) if name == "sac" else mods
            res.append(({m: _params(getattr(algo, m)) for m in keep}, logs))
        (PL, lL), (PT, lT) = res
        np.testing.assert_allclose(lL, lT, rtol=1e-5, err_msg=name)
        for m in PL:
            for k in PL[m]:
                np.testing.assert_allclose(PL[m][k], PT[m][k], rtol=1e-4, atol=1e-6, err_msg=f"{name} {m} {k}")
