"""Third-party PyTorch code run on Lucid (``import lucid as torch``), thirteenth batch:
vwxyzjn/cleanrl's single-file agents with discrete actions (SAC and TD3 are in
``test_tutorials_batch13_thirdparty_rl_continuous.py``, which uses this file's stand-ins).

- ``cleanrl/ppo.py``: ``layer_init`` (``nn.init.orthogonal_`` with a gain, ``constant_``), the
  ``Agent`` with ``Categorical(logits=...)`` (``sample``, ``log_prob``, ``entropy``), the rollout into
  preallocated ``torch.zeros`` buffers, learning-rate annealing through ``param_groups``, GAE over
  ``reversed(range(num_steps))``, minibatches drawn by ``np.random.shuffle`` of the indices, the
  clipped surrogate and clipped value losses, advantage normalisation, ``clip_grad_norm_``,
  ``approx_kl`` / ``clipfracs`` and the explained variance.
- ``cleanrl/dqn.py``: the ``QNetwork``, ``linear_schedule`` epsilon-greedy with ``random.random()``,
  the TD target from ``target_network(...).max(dim=1)``, ``gather(1, actions).squeeze()`` and
  ``F.mse_loss``, and the target update through ``param.data.copy_(tau * ... + (1 - tau) * ...)``.
- ``cleanrl/c51.py``: the distributional ``QNetwork`` (``register_buffer("atoms", torch.linspace)``,
  ``softmax`` over atoms, ``pmfs[torch.arange(len(x)), action]``) and the projection of the
  target distribution with ``floor``/``ceil``/``clamp`` and row-wise ``index_add_``.

gym/gymnasium and stable-baselines3/cleanrl_utils are not installed: the file carries tiny
deterministic environments with their API (marked ``# stand-in``; two copies in a vector env for
PPO, one where the agent takes one), gymnasium's vector-env variant for the continuous agents, and a
small ``ReplayBuffer`` with stable-baselines3's ``sample`` fields. Sizes, steps and hidden widths are
shrunk; ``device`` is the default device (the scripts pick ``cuda`` or ``cpu``); the
``SummaryWriter`` logging and argument parsing are dropped (``args`` is a namespace).

The assertions without PyTorch recompute one update in NumPy (GAE, the clipped PPO loss with the
normalised advantages and the categorical entropy, the orthogonal initialisation, the DQN TD target,
the C51 projection by Bellemare et al.'s per-atom loop) and require returns or losses to improve by a
stated margin. The parity tests replace each library's random draws (``Categorical.sample``,
``Normal.rsample``, ``torch.normal``, ``torch.randn_like``) by one NumPy stream and compare with
PyTorch from the same NumPy-drawn weights.

Fixed on the way: the legacy constructor ``torch.Tensor(n)`` with a NumPy integer ``n`` (``np.prod``
of a shape, say) made a 0-d int64 tensor holding ``n``; PyTorch makes an uninitialised float32 tensor
of ``n`` elements, as for a Python int (``lucid/_core/tensor.py``).
"""
import contextlib
import random
import re
from collections import namedtuple
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.distributions  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401


# --------------------------------------------------------------------------- stand-in gym ----------
class Discrete:  # stand-in for gym.spaces.Discrete
    def __init__(self, n, seed):
        self.n, self.shape, self.rng = n, (), np.random.RandomState(seed)

    def sample(self):
        return int(self.rng.randint(self.n))


class Box:  # stand-in for gym.spaces.Box
    def __init__(self, low, high, shape, seed, dtype=np.float32):
        self.low = np.full(shape, low, dtype)
        self.high = np.full(shape, high, dtype)
        self.shape, self.dtype, self.rng = shape, dtype, np.random.RandomState(seed)

    def sample(self):
        return self.rng.uniform(self.low, self.high).astype(self.dtype)


class SignEnv:  # stand-in environment: reward 1 when the action names the sign of obs[0]
    """Deterministic given its seed: 3-d observations, 2 actions, episodes of 4 steps."""

    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)
        self.observation_space = Box(-1.0, 1.0, (3,), seed)
        self.action_space = Discrete(2, seed)

    def reset(self):
        self.t, self.ret = 0, 0.0
        self.obs = self.rng.uniform(-1, 1, 3).astype(np.float32)
        return self.obs

    def step(self, action):
        reward = float(int(action) == int(self.obs[0] > 0))
        self.t += 1
        self.ret += reward
        self.obs = self.rng.uniform(-1, 1, 3).astype(np.float32)
        return self.obs, reward, self.t >= 4, {}


class SyncVectorEnv:  # stand-in for gym.vector.SyncVectorEnv + RecordEpisodeStatistics (old gym API)
    def __init__(self, envs):
        self.envs = envs
        self.num_envs = len(envs)
        self.single_observation_space = envs[0].observation_space
        self.single_action_space = envs[0].action_space
        self.action_space = SimpleNamespace(sample=lambda: np.array([e.action_space.sample() for e in envs]))

    def reset(self):
        return np.stack([e.reset() for e in self.envs])

    def step(self, actions):
        obs, rews, dones, infos = [], [], [], []
        for e, a in zip(self.envs, actions):
            o, r, d, info = e.step(a)
            if d:
                info = {"terminal_observation": o, "episode": {"r": e.ret, "l": e.t}}
                o = e.reset()
            obs.append(o), rews.append(r), dones.append(d), infos.append(info)
        return np.stack(obs), np.array(rews, np.float32), np.array(dones), infos

    def close(self):
        pass


class TargetEnv:  # stand-in continuous environment (gymnasium API): reward -(a - 1.5 obs[0])^2
    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)
        self.observation_space = Box(-1.0, 1.0, (3,), seed)
        self.action_space = Box(-2.0, 2.0, (1,), seed)

    def reset(self, seed=None):
        self.t, self.ret = 0, 0.0
        self.obs = self.rng.uniform(-1, 1, 3).astype(np.float32)
        return self.obs, {}

    def step(self, action):
        reward = -float((action[0] - 1.5 * self.obs[0]) ** 2)
        self.t += 1
        self.ret += reward
        self.obs = self.rng.uniform(-1, 1, 3).astype(np.float32)
        return self.obs, reward, False, self.t >= 5, {}


class GymnasiumVectorEnv:  # stand-in for gymnasium.vector.SyncVectorEnv (final_observation/final_info)
    def __init__(self, envs):
        self.envs = envs
        self.num_envs = len(envs)
        self.single_observation_space = envs[0].observation_space
        self.single_action_space = envs[0].action_space

    def reset(self, seed=None):
        return np.stack([e.reset()[0] for e in self.envs]), {}

    def step(self, actions):
        obs, rews, terms, truncs, final_obs, final_info = [], [], [], [], [], []
        for e, a in zip(self.envs, actions):
            o, r, term, trunc, _ = e.step(a)
            fo, fi = None, None
            if term or trunc:
                fo, fi = o, {"episode": {"r": e.ret, "l": e.t}}
                o, _ = e.reset()
            obs.append(o), rews.append(r), terms.append(term), truncs.append(trunc)
            final_obs.append(fo), final_info.append(fi)
        infos = {}
        if any(f is not None for f in final_obs):
            infos = {"final_observation": final_obs, "final_info": final_info}
        return np.stack(obs), np.array(rews, np.float32), np.array(terms), np.array(truncs), infos

    def close(self):
        pass


ReplayBufferSamples = namedtuple("ReplayBufferSamples",
                                 ["observations", "actions", "next_observations", "dones", "rewards"])


class ReplayBuffer:  # stand-in for stable_baselines3 / cleanrl_utils ReplayBuffer (the fields cleanrl reads)
    def __init__(self, torch, buffer_size, observation_space, action_space, device, n_envs=1, **kw):
        self.torch, self.device, self.pos, self.full, self.n_envs = torch, device, 0, False, n_envs
        self.buffer_size = buffer_size // n_envs
        act_shape = (1,) if isinstance(action_space, Discrete) else action_space.shape
        self.act_dtype = np.int64 if isinstance(action_space, Discrete) else np.float32
        self.observations = np.zeros((self.buffer_size, n_envs) + observation_space.shape, np.float32)
        self.next_observations = np.zeros_like(self.observations)
        self.actions = np.zeros((self.buffer_size, n_envs) + act_shape, self.act_dtype)
        self.rewards = np.zeros((self.buffer_size, n_envs), np.float32)
        self.dones = np.zeros((self.buffer_size, n_envs), np.float32)

    def add(self, obs, next_obs, action, reward, done, infos):
        self.observations[self.pos] = obs
        self.next_observations[self.pos] = next_obs
        self.actions[self.pos] = np.asarray(action).reshape(self.n_envs, -1)
        self.rewards[self.pos], self.dones[self.pos] = reward, done
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def sample(self, batch_size):
        upper = self.buffer_size if self.full else self.pos
        idx = np.random.randint(0, upper, size=batch_size)
        env = np.random.randint(0, self.n_envs, size=batch_size)
        t = lambda a: self.torch.tensor(a).to(self.device)  # noqa: E731
        return ReplayBufferSamples(t(self.observations[idx, env]), t(self.actions[idx, env]),
                                   t(self.next_observations[idx, env]), t(self.dones[idx, env][:, None]),
                                   t(self.rewards[idx, env][:, None]))


# --------------------------------------------------------------------------- shared helpers --------
def _overwrite(torch, module, seed, scale=0.3):
    """NumPy-drawn weights (the same start on both libraries for the parity runs)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)).astype(np.float32)))


@contextlib.contextmanager
def _shared_draws(torch, seed):
    """Replace the library's random draws by one NumPy stream, so PyTorch and Lucid draw the same."""
    rng = np.random.RandomState(seed)
    dist = torch.distributions
    saved = (dist.Categorical.sample, dist.Normal.rsample, torch.normal, torch.randn_like)

    def categorical_sample(self, sample_shape=()):
        p = self.probs.detach().cpu().numpy().astype(np.float64)
        u = rng.random_sample(p.shape[:-1])[..., None]
        return torch.tensor((np.cumsum(p, -1) < u).sum(-1).clip(0, p.shape[-1] - 1)).to(self.probs.device)

    def normal_rsample(self, sample_shape=()):
        eps = torch.tensor(rng.standard_normal(tuple(self.loc.shape)).astype(np.float32)).to(self.loc.device)
        return self.loc + eps * self.scale

    def normal(mean, std, *a, **k):
        return mean + std * torch.tensor(rng.standard_normal(tuple(std.shape)).astype(np.float32)).to(std.device)

    def randn_like(x, **k):
        return torch.tensor(rng.standard_normal(tuple(x.shape)).astype(np.float32)).to(x.device)

    dist.Categorical.sample, dist.Normal.rsample, torch.normal, torch.randn_like = (
        categorical_sample, normal_rsample, normal, randn_like)
    try:
        yield
    finally:
        dist.Categorical.sample, dist.Normal.rsample, torch.normal, torch.randn_like = saved


def _reference_torch():
    """PyTorch for the parity runs, on one thread (these models are tiny; its thread pool only
    contends with other processes on a shared machine)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _params(module):
    return [p.detach().cpu().numpy().copy() for p in module.parameters()]


# --------------------------------------------------------------------------- cleanrl/ppo.py --------
def ppo_page(torch, weights_seed=None, num_updates=6):
    nn, optim = torch.nn, torch.optim
    Categorical = torch.distributions.categorical.Categorical
    args = SimpleNamespace(seed=1, num_envs=2, num_steps=16, learning_rate=1e-2, anneal_lr=True, gamma=0.99,
                           gae_lambda=0.95, num_minibatches=2, update_epochs=2, norm_adv=True, clip_coef=0.2,
                           clip_vloss=True, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, target_kl=None)
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.total_timesteps = num_updates * args.batch_size

    def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
        return layer

    class Agent(nn.Module):
        def __init__(self, envs):
            super().__init__()
            self.critic = nn.Sequential(
                layer_init(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 64)),
                nn.Tanh(),
                layer_init(nn.Linear(64, 64)),
                nn.Tanh(),
                layer_init(nn.Linear(64, 1), std=1.0),
            )
            self.actor = nn.Sequential(
                layer_init(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 64)),
                nn.Tanh(),
                layer_init(nn.Linear(64, 64)),
                nn.Tanh(),
                layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01),
            )

        def get_value(self, x):
            return self.critic(x)

        def get_action_and_value(self, x, action=None):
            logits = self.actor(x)
            probs = Categorical(logits=logits)
            if action is None:
                action = probs.sample()
            return action, probs.log_prob(action), probs.entropy(), self.critic(x)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.empty(0).device  # the script: cuda if available else cpu

    envs = SyncVectorEnv([SignEnv(args.seed + i) for i in range(args.num_envs)])
    assert isinstance(envs.single_action_space, Discrete), "only discrete action space is supported"
    obs_space_shape = envs.single_observation_space.shape
    action_space_shape = envs.single_action_space.shape

    agent = Agent(envs).to(device)
    out = {"init": [m.weight.detach().cpu().numpy().copy() for m in agent.actor if isinstance(m, nn.Linear)]}
    if weights_seed is not None:
        _overwrite(torch, agent, weights_seed)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs) + obs_space_shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + action_space_shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    global_step = 0
    next_obs = torch.Tensor(envs.reset()).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    num_updates = args.total_timesteps // args.batch_size
    out.update(returns=[], lrs=[], losses=[], kls=[], clipfracs=[], explained=[], printed=[])

    for update in range(1, num_updates + 1):
        if args.anneal_lr:
            frac = 1.0 - (update - 1.0) / num_updates
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow
        out["lrs"].append(optimizer.param_groups[0]["lr"])

        for step in range(0, args.num_steps):
            global_step += 1 * args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_obs, reward, done, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(done).to(device)

            for item in info:
                if "episode" in item.keys():
                    out["printed"].append(f"global_step={global_step}, episodic_return={item['episode']['r']}")
                    break
        out["returns"].append(float(rewards.sum().item()))

        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values
        if update == 1:  # what the GAE check needs, before the update changes anything
            out["gae_in"] = {k: v.cpu().numpy().copy() for k, v in dict(
                rewards=rewards, values=values, dones=dones, next_done=next_done, next_value=next_value,
                advantages=advantages, returns=returns).items()}

        b_obs = obs.reshape((-1,) + obs_space_shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + action_space_shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        b_inds = np.arange(args.batch_size)
        clipfracs = []
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]

                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds],
                        -args.clip_coef,
                        args.clip_coef,
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
                    v_loss = 0.5 * v_loss_max.mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
                if update == num_updates and epoch == args.update_epochs - 1 and end == args.batch_size:
                    # the last minibatch: what the NumPy recomputation of the loss needs
                    out["last_mb"] = dict(
                        logits=agent.actor(b_obs[mb_inds]).detach().cpu().numpy(),
                        actions=b_actions.long()[mb_inds].cpu().numpy(),
                        old_logprobs=b_logprobs[mb_inds].cpu().numpy(), adv=b_advantages[mb_inds].cpu().numpy(),
                        newvalue=newvalue.detach().cpu().numpy(), returns=b_returns[mb_inds].cpu().numpy(),
                        values=b_values[mb_inds].cpu().numpy(), loss=loss.item(), pg_loss=pg_loss.item(),
                        v_loss=v_loss.item(), entropy=entropy_loss.item(), norm_adv=mb_advantages.cpu().numpy())

                optimizer.zero_grad()
                loss.backward()
                out.setdefault("grad_norms", []).append(
                    float(nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)))
                optimizer.step()

            if args.target_kl is not None:
                if approx_kl > args.target_kl:
                    break

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        out["losses"].append((v_loss.item(), pg_loss.item(), entropy_loss.item(), old_approx_kl.item(),
                              approx_kl.item()))
        out["clipfracs"].append(np.mean(clipfracs))
        out["explained"].append(explained_var)
    envs.close()
    probe = np.random.RandomState(0).uniform(-1, 1, (200, 3)).astype(np.float32)
    with torch.no_grad():
        greedy = agent.actor(torch.tensor(probe).to(device)).argmax(1).cpu().numpy()
    out["accuracy"] = float((greedy == (probe[:, 0] > 0)).mean())
    out["params"] = _params(agent)
    return out


def _gae_numpy(d, gamma=0.99, lam=0.95):
    r, v, dn = (d[k].astype(np.float64) for k in ("rewards", "values", "dones"))
    adv, last = np.zeros_like(r), 0.0
    for t in reversed(range(len(r))):
        nonterm = 1.0 - (d["next_done"] if t == len(r) - 1 else dn[t + 1])
        nextv = d["next_value"][0] if t == len(r) - 1 else v[t + 1]
        delta = r[t] + gamma * nextv * nonterm - v[t]
        adv[t] = last = delta + gamma * lam * nonterm * last
    return adv, adv + v


def _ppo_loss_numpy(m, clip=0.2, ent_coef=0.01, vf_coef=0.5):
    z = m["logits"].astype(np.float64)
    logp_all = z - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)) - z.max(1, keepdims=True)
    logp = logp_all[np.arange(len(z)), m["actions"]]
    entropy = -(np.exp(logp_all) * logp_all).sum(1)
    ratio = np.exp(logp - m["old_logprobs"])
    adv = (m["adv"] - m["adv"].mean()) / (m["adv"].std(ddof=1) + 1e-8)
    pg = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - clip, 1 + clip)).mean()
    nv, ret, vals = m["newvalue"], m["returns"], m["values"]
    v_clipped = vals + np.clip(nv - vals, -clip, clip)
    v = 0.5 * np.maximum((nv - ret) ** 2, (v_clipped - ret) ** 2).mean()
    return pg, v, entropy.mean(), pg - ent_coef * entropy.mean() + vf_coef * v, adv


def test_cleanrl_ppo():
    out = ppo_page(lucid)
    # layer_init: orthogonal rows scaled by the gain (sqrt(2), sqrt(2), 0.01 in the actor)
    for w, gain in zip(out["init"], (np.sqrt(2), np.sqrt(2), 0.01)):
        k = min(w.shape)
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        np.testing.assert_allclose(gram, gain ** 2 * np.eye(k), atol=1e-5 * max(gain ** 2, 1))
    # GAE of the first rollout, recomputed in float64
    adv, ret = _gae_numpy(out["gae_in"])
    np.testing.assert_allclose(out["gae_in"]["advantages"], adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["gae_in"]["returns"], ret, rtol=1e-5, atol=1e-5)
    # the last minibatch's loss, recomputed from its logits
    m = out["last_mb"]
    pg, v, ent, loss, nadv = _ppo_loss_numpy(m)
    np.testing.assert_allclose([m["pg_loss"], m["v_loss"], m["entropy"], m["loss"]], [pg, v, ent, loss],
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(m["norm_adv"], nadv, rtol=1e-4, atol=1e-5)
    assert abs(nadv.mean()) < 1e-6 and nadv.std(ddof=1) == pytest.approx(1.0, abs=1e-6)
    # lr annealed linearly (the last update at 1/6 of the start); 2 epochs of 2 minibatches per update
    np.testing.assert_allclose(out["lrs"], [1e-2 * (1 - k / 6) for k in range(6)], rtol=1e-12)
    assert all(0 <= c <= 1 for c in out["clipfracs"]) and len(out["grad_norms"]) == 6 * 2 * 2
    # learning: 32 decisions per rollout, chance gives 16; the last two rollouts get >= 8 more each,
    # and the greedy policy names the sign of obs[0] on >= 90% of 200 fresh observations
    assert out["returns"][0] <= 20 and min(out["returns"][-2:]) >= out["returns"][0] + 8, out["returns"]
    assert out["accuracy"] >= 0.9
    # episodes of 4 steps in 2 envs: one line per 8 global steps, returns counted in whole rewards
    assert len(out["printed"]) == 6 * 4
    assert all(re.fullmatch(rf"global_step={8 * (k + 1)}, episodic_return=[0-4]\.0", line)
               for k, line in enumerate(out["printed"])), out["printed"]


def test_cleanrl_ppo_torch_parity():
    torch = _reference_torch()
    with _shared_draws(lucid, 7):
        r = ppo_page(lucid, weights_seed=3, num_updates=3)
    with _shared_draws(torch, 7):
        t = ppo_page(torch, weights_seed=3, num_updates=3)
    assert r["returns"] == t["returns"] and r["printed"] == t["printed"]
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r["grad_norms"], t["grad_norms"], rtol=1e-4)
    np.testing.assert_allclose(r["explained"], t["explained"], rtol=1e-4, atol=1e-6)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- cleanrl/dqn.py --------
def dqn_page(torch, weights_seed=None, total_timesteps=240):
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    args = SimpleNamespace(seed=1, total_timesteps=total_timesteps, learning_rate=2.5e-3, buffer_size=1000,
                           gamma=0.99, tau=1.0, target_network_frequency=20, batch_size=32, start_e=1,
                           end_e=0.05, exploration_fraction=0.5, learning_starts=40, train_frequency=2)

    class QNetwork(nn.Module):
        def __init__(self, env):
            super().__init__()
            self.network = nn.Sequential(
                nn.Linear(np.array(env.single_observation_space.shape).prod(), 120),
                nn.ReLU(),
                nn.Linear(120, 84),
                nn.ReLU(),
                nn.Linear(84, env.single_action_space.n),
            )

        def forward(self, x):
            return self.network(x)

    def linear_schedule(start_e: float, end_e: float, duration: int, t: int) -> float:
        slope = (end_e - start_e) / duration
        return max(slope * t + start_e, end_e)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.empty(0).device  # the script: cuda if available else cpu

    envs = SyncVectorEnv([SignEnv(args.seed)])
    assert isinstance(envs.single_action_space, Discrete), "only discrete action space is supported"

    q_network = QNetwork(envs).to(device)
    if weights_seed is not None:
        _overwrite(torch, q_network, weights_seed, scale=0.1)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs).to(device)
    target_network.load_state_dict(q_network.state_dict())

    rb = ReplayBuffer(torch, args.buffer_size, envs.single_observation_space, envs.single_action_space, device,
                      handle_timeout_termination=True)
    out = dict(losses=[], returns=[], td=None, synced=[])

    obs = envs.reset()
    for global_step in range(args.total_timesteps):
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            q_values = q_network(torch.Tensor(obs).to(device))
            actions = torch.argmax(q_values, dim=1).cpu().numpy()

        next_obs, rewards, dones, infos = envs.step(actions)

        for info in infos:
            if "episode" in info.keys():
                out["returns"].append(info["episode"]["r"])
                break

        real_next_obs = next_obs.copy()
        for idx, d in enumerate(dones):
            if d:
                real_next_obs[idx] = infos[idx]["terminal_observation"]
        rb.add(obs, real_next_obs, actions, rewards, dones, infos)

        obs = next_obs

        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                data = rb.sample(args.batch_size)
                with torch.no_grad():
                    target_max, _ = target_network(data.next_observations).max(dim=1)
                    td_target = data.rewards.flatten() + args.gamma * target_max * (1 - data.dones.flatten())
                old_val = q_network(data.observations).gather(1, data.actions).squeeze()
                loss = F.mse_loss(td_target, old_val)
                if out["td"] is None:
                    with torch.no_grad():
                        out["td"] = dict(next_q=target_network(data.next_observations).cpu().numpy(),
                                         q=q_network(data.observations).cpu().numpy(),
                                         **{k: getattr(data, k).cpu().numpy() for k in ReplayBufferSamples._fields},
                                         td_target=td_target.cpu().numpy(), loss=loss.item())
                out["losses"].append(loss.item())

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            if global_step % args.target_network_frequency == 0:
                for target_network_param, q_network_param in zip(target_network.parameters(), q_network.parameters()):
                    target_network_param.data.copy_(
                        args.tau * q_network_param.data + (1.0 - args.tau) * target_network_param.data
                    )
                out["synced"].append(all(bool((a == b).all()) for a, b in
                                         zip(target_network.parameters(), q_network.parameters())))
    envs.close()
    out["params"] = _params(q_network)
    return out


def test_cleanrl_dqn():
    out = dqn_page(lucid)
    td = out["td"]
    want = td["rewards"][:, 0] + 0.99 * td["next_q"].max(1) * (1 - td["dones"][:, 0])
    np.testing.assert_allclose(td["td_target"], want, rtol=1e-6, atol=1e-6)
    old_val = np.take_along_axis(td["q"], td["actions"], 1)[:, 0]
    assert td["loss"] == pytest.approx(((want - old_val) ** 2).mean(), rel=1e-5)
    assert out["synced"] and all(out["synced"])  # tau = 1: the target becomes the online network
    assert len(out["losses"]) == len(range(42, 240, 2))  # trains on even steps after learning_starts
    # exploration decays over the first 120 steps: the last 15 episodes score >= 1 more (of 4) than the first 10
    first, last = np.mean(out["returns"][:10]), np.mean(out["returns"][-15:])
    assert len(out["returns"]) == 60 and first <= 2.5 and last >= first + 1.0, out["returns"]


def test_cleanrl_dqn_torch_parity():
    torch = _reference_torch()
    r, t = dqn_page(lucid, weights_seed=5, total_timesteps=120), dqn_page(torch, weights_seed=5, total_timesteps=120)
    assert r["returns"] == t["returns"]
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4, atol=1e-6)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- cleanrl/c51.py --------
def c51_page(torch, weights_seed=None, total_timesteps=160):
    nn, optim = torch.nn, torch.optim
    args = SimpleNamespace(seed=1, total_timesteps=total_timesteps, learning_rate=2.5e-3, n_atoms=11, v_min=-5,
                           v_max=5, buffer_size=1000, gamma=0.99, target_network_frequency=40,
                           max_grad_norm=0.5, batch_size=16, start_e=1, end_e=0.02, exploration_fraction=0.5,
                           learning_starts=40, train_frequency=2)

    class QNetwork(nn.Module):
        def __init__(self, env, n_atoms=101, v_min=-100, v_max=100):
            super(QNetwork, self).__init__()
            self.env = env
            self.n_atoms = n_atoms
            self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
            self.n = env.single_action_space.n
            self.network = nn.Sequential(
                nn.Linear(np.array(env.single_observation_space.shape).prod(), 120),
                nn.ReLU(),
                nn.Linear(120, 84),
                nn.ReLU(),
                nn.Linear(84, self.n * n_atoms)
            )

        def forward(self, x):
            return self.network(x)

        def get_action(self, x, action=None):
            logits = self.forward(x)
            pmfs = torch.softmax(logits.view(len(x), self.n, self.n_atoms), dim=2)
            q_values = (pmfs*self.atoms).sum(2)
            if action is None:
                action = torch.argmax(q_values, 1)
            return action, pmfs[torch.arange(len(x)), action]

    def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
        slope = (end_e - start_e) / duration
        return max(slope * t + start_e, end_e)

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.empty(0).device  # the script: cuda if available else cpu

    envs = SyncVectorEnv([SignEnv(0)])
    assert isinstance(envs.single_action_space, Discrete), "only discrete action space is supported"

    q_network = QNetwork(envs, n_atoms=args.n_atoms, v_min=args.v_min, v_max=args.v_max).to(device)
    if weights_seed is not None:
        _overwrite(torch, q_network, weights_seed, scale=0.1)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01/args.batch_size)
    target_network = QNetwork(envs, n_atoms=args.n_atoms, v_min=args.v_min, v_max=args.v_max).to(device)
    target_network.load_state_dict(q_network.state_dict())

    rb = ReplayBuffer(torch, args.buffer_size, envs.single_observation_space, envs.single_action_space, device,
                      optimize_memory_usage=True)
    out = dict(losses=[], returns=[], proj=None)

    obs = envs.reset()
    for global_step in range(args.total_timesteps):
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction*args.total_timesteps, global_step)
        if random.random() < epsilon:
            actions = envs.action_space.sample()
        else:
            actions, pmf = q_network.get_action(torch.Tensor(obs).to(device))
            actions = actions.cpu().numpy()

        next_obs, rewards, dones, infos = envs.step(actions)

        for info in infos:
            if "episode" in info.keys():
                out["returns"].append(info["episode"]["r"])
                break

        real_next_obs = next_obs.copy()
        for idx, d in enumerate(dones):
            if d:
                real_next_obs[idx] = infos[idx]["terminal_observation"]
        rb.add(obs, real_next_obs, actions, rewards, dones, infos)

        obs = next_obs

        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            data = rb.sample(args.batch_size)

            with torch.no_grad():
                _, next_pmfs = target_network.get_action(data.next_observations)
                next_atoms = data.rewards + args.gamma * target_network.atoms * (1 - data.dones)
                # projection
                delta_z = target_network.atoms[1] - target_network.atoms[0]
                tz = next_atoms.clamp(args.v_min, args.v_max)

                b = (tz - args.v_min)/ delta_z
                l = b.floor().clamp(0, args.n_atoms-1)
                u = b.ceil().clamp(0, args.n_atoms-1)
                # (l == u).float() handles the case where bj is exactly an integer
                # example bj = 1, then the upper ceiling should be uj= 2, and lj= 1
                d_m_l = (u + (l == u).float() - b) * next_pmfs
                d_m_u = (b - l) * next_pmfs
                target_pmfs = torch.zeros_like(next_pmfs)
                for i in range(target_pmfs.size(0)):
                    target_pmfs[i].index_add_(0, l[i].long(), d_m_l[i])
                    target_pmfs[i].index_add_(0, u[i].long(), d_m_u[i])

            _, old_pmfs = q_network.get_action(data.observations, data.actions.flatten())
            loss = (-(target_pmfs * old_pmfs.clamp(min=1e-5, max=1-1e-5).log()).sum(-1)).mean()
            if out["proj"] is None:
                out["proj"] = dict(next_pmfs=next_pmfs.cpu().numpy(), rewards=data.rewards.cpu().numpy(),
                                   dones=data.dones.cpu().numpy(), target_pmfs=target_pmfs.cpu().numpy(),
                                   old_pmfs=old_pmfs.detach().cpu().numpy(), loss=loss.item(),
                                   atoms=target_network.atoms.cpu().numpy())
            out["losses"].append(loss.item())

            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(list(q_network.parameters()), args.max_grad_norm)
            optimizer.step()

            if global_step % args.target_network_frequency == 0:
                target_network.load_state_dict(q_network.state_dict())
    envs.close()
    out["params"] = _params(q_network)
    return out


def _c51_projection_numpy(p, r, d, atoms, gamma=0.99, v_min=-5.0, v_max=5.0):
    """Bellemare et al.'s Algorithm 1, one atom at a time, in float64."""
    n = len(atoms)
    dz = (v_max - v_min) / (n - 1)
    m = np.zeros(p.shape)
    for i in range(p.shape[0]):
        for j in range(n):
            tz = min(v_max, max(v_min, r[i] + (1 - d[i]) * gamma * atoms[j]))
            bj = (tz - v_min) / dz
            lo, up = int(np.floor(bj)), int(np.ceil(bj))
            if lo == up:
                m[i, lo] += p[i, j]
            else:
                m[i, lo] += p[i, j] * (up - bj)
                m[i, up] += p[i, j] * (bj - lo)
    return m


def test_cleanrl_c51():
    out = c51_page(lucid)
    pr = out["proj"]
    np.testing.assert_allclose(pr["atoms"], np.linspace(-5, 5, 11), atol=1e-6)
    want = _c51_projection_numpy(pr["next_pmfs"].astype(np.float64), pr["rewards"][:, 0], pr["dones"][:, 0],
                                 np.linspace(-5, 5, 11))
    np.testing.assert_allclose(pr["target_pmfs"], want, atol=2e-6)
    np.testing.assert_allclose(pr["target_pmfs"].sum(1), 1.0, atol=1e-5)  # the projection keeps the mass
    ce = -(want * np.log(np.clip(pr["old_pmfs"], 1e-5, 1 - 1e-5))).sum(-1).mean()
    assert pr["loss"] == pytest.approx(ce, rel=1e-5)
    assert len(out["losses"]) == len(range(42, 160, 2))
    assert np.mean(out["losses"][-10:]) < np.mean(out["losses"][:10]) - 0.3, out["losses"]
    assert np.mean(out["returns"][-5:]) >= 3.0 and np.mean(out["returns"][:5]) < 3.0, out["returns"]


def test_cleanrl_c51_torch_parity():
    torch = _reference_torch()
    r, t = c51_page(lucid, weights_seed=6, total_timesteps=100), c51_page(torch, weights_seed=6, total_timesteps=100)
    assert r["returns"] == t["returns"]
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-4, atol=1e-6)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- fixed on the way --------
def _legacy_sizes(torch):
    space = Box(-2.0, 2.0, (3, 2), seed=0)
    return [torch.Tensor(space.shape),  # cleanrl's target_entropy: the shape as data
            torch.Tensor(np.prod(space.shape)),  # a NumPy integer is a size, as a Python int
            torch.Tensor(np.int64(2), np.int32(3)), torch.Tensor(2, np.int64(3))]


def test_legacy_tensor_constructor_takes_numpy_integer_sizes():
    # was: Tensor(np.int64(6)) made a 0-d int64 tensor holding 6 (PyTorch: six uninitialised floats)
    data, six, two_by_three, mixed = _legacy_sizes(lucid)
    assert data.tolist() == [3.0, 2.0] and -lucid.prod(data).item() == -6.0
    assert six.shape == (6,) and two_by_three.shape == (2, 3) and mixed.shape == (2, 3)
    assert {t.dtype for t in (data, six, two_by_three, mixed)} == {lucid.float32}
    with pytest.raises(TypeError, match="a size must be all ints"):
        lucid.Tensor(np.int64(2), "x")


def test_legacy_tensor_constructor_takes_numpy_integer_sizes_torch_parity():
    torch = _reference_torch()
    r, t = _legacy_sizes(lucid), _legacy_sizes(torch)
    assert [tuple(a.shape) for a in r] == [tuple(b.shape) for b in t]
    assert r[0].tolist() == t[0].tolist() and [str(a.dtype)[6:] for a in r] == [str(b.dtype)[6:] for b in t]
