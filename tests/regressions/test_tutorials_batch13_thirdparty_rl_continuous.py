"""Third-party PyTorch code run on Lucid (``import lucid as torch``), thirteenth batch:
vwxyzjn/cleanrl's continuous-action agents (the discrete ones, and the stand-in environments and
replay buffer used here, are in ``test_tutorials_batch13_thirdparty_rl.py``).

- ``cleanrl/sac_continuous_action.py``: the tanh-squashed ``Normal`` actor (``rsample``, the
  ``log(action_scale * (1 - y_t.pow(2)) + 1e-6)`` correction, ``register_buffer`` for the action
  scale and bias), twin soft Q networks with ``torch.min``, automatic entropy tuning through
  ``log_alpha`` and its own Adam, delayed actor updates, polyak updates with ``param.data.copy_``.
- ``cleanrl/td3_continuous_action.py``: exploration with ``torch.normal(0, actor.action_scale *
  noise)``, target policy smoothing with ``torch.randn_like(...).clamp(...)`` and the action
  ``clamp``, delayed actor updates, polyak updates of actor and critics.

The stand-in environment (gymnasium API, one-dimensional ``Box`` actions in [-2, 2], reward
``-(a - 1.5 obs[0])^2``) is deterministic given its seed. The assertions without PyTorch check the
SAC log-probability against a float64 change of variables from the drawn action, the squashed mean,
the first ``log_alpha`` gradient and Adam step, the TD3 smoothing noise and clamps and TD target,
polyak averaging recomputed, and learning (the deterministic action's error to the best action falls
by a stated factor, returns improve by a stated margin). The parity tests share one NumPy stream of
draws between the libraries and start from the same NumPy-drawn weights.
"""
import random
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.distributions  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401
from test_tutorials_batch13_thirdparty_rl import (Box, GymnasiumVectorEnv, ReplayBuffer, TargetEnv, _overwrite,
                                                  _params, _reference_torch, _shared_draws)


# --------------------------------------------------------------------------- cleanrl/sac_continuous_action.py
def sac_page(torch, weights_seed=None, total_timesteps=120, hidden=32):
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    args = SimpleNamespace(seed=1, total_timesteps=total_timesteps, num_envs=1, buffer_size=1000, gamma=0.99,
                           tau=0.005, batch_size=16, learning_starts=20, policy_lr=3e-3, q_lr=1e-2,
                           policy_frequency=2, target_network_frequency=1, alpha=0.2, autotune=True)

    class SoftQNetwork(nn.Module):
        def __init__(self, env):
            super().__init__()
            self.fc1 = nn.Linear(
                np.array(env.single_observation_space.shape).prod() + np.prod(env.single_action_space.shape),
                hidden,
            )
            self.fc2 = nn.Linear(hidden, hidden)
            self.fc3 = nn.Linear(hidden, 1)

        def forward(self, x, a):
            x = torch.cat([x, a], 1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    LOG_STD_MAX = 2
    LOG_STD_MIN = -5

    class Actor(nn.Module):
        def __init__(self, env):
            super().__init__()
            self.fc1 = nn.Linear(np.array(env.single_observation_space.shape).prod(), hidden)
            self.fc2 = nn.Linear(hidden, hidden)
            self.fc_mean = nn.Linear(hidden, np.prod(env.single_action_space.shape))
            self.fc_logstd = nn.Linear(hidden, np.prod(env.single_action_space.shape))
            # action rescaling
            self.register_buffer(
                "action_scale",
                torch.tensor(
                    (env.single_action_space.high - env.single_action_space.low) / 2.0,
                    dtype=torch.float32,
                ),
            )
            self.register_buffer(
                "action_bias",
                torch.tensor(
                    (env.single_action_space.high + env.single_action_space.low) / 2.0,
                    dtype=torch.float32,
                ),
            )

        def forward(self, x):
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            mean = self.fc_mean(x)
            log_std = self.fc_logstd(x)
            log_std = torch.tanh(log_std)
            log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # From SpinUp / Denis Yarats

            return mean, log_std

        def get_action(self, x):
            mean, log_std = self(x)
            std = log_std.exp()
            normal = torch.distributions.Normal(mean, std)
            x_t = normal.rsample()  # for reparameterization trick (mean + std * N(0,1))
            y_t = torch.tanh(x_t)
            action = y_t * self.action_scale + self.action_bias
            log_prob = normal.log_prob(x_t)
            # Enforcing Action Bound
            log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
            log_prob = log_prob.sum(1, keepdim=True)
            mean = torch.tanh(mean) * self.action_scale + self.action_bias
            return action, log_prob, mean

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.empty(0).device  # the script: cuda if available else cpu

    envs = GymnasiumVectorEnv([TargetEnv(args.seed + i) for i in range(args.num_envs)])
    assert isinstance(envs.single_action_space, Box), "only continuous action space is supported"

    max_action = float(envs.single_action_space.high[0])

    actor = Actor(envs).to(device)
    qf1 = SoftQNetwork(envs).to(device)
    qf2 = SoftQNetwork(envs).to(device)
    if weights_seed is not None:
        for k, m in enumerate((actor, qf1, qf2)):
            _overwrite(torch, m, weights_seed + k)
    qf1_target = SoftQNetwork(envs).to(device)
    qf2_target = SoftQNetwork(envs).to(device)
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.policy_lr)

    if args.autotune:
        target_entropy = -torch.prod(torch.Tensor(envs.single_action_space.shape).to(device)).item()
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        alpha = log_alpha.exp().item()
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr)
    else:
        alpha = args.alpha

    envs.single_observation_space.dtype = np.float32
    rb = ReplayBuffer(torch, args.buffer_size, envs.single_observation_space, envs.single_action_space, device,
                      n_envs=args.num_envs, handle_timeout_termination=False)
    out = dict(max_action=max_action, target_entropy=target_entropy, qf_losses=[], actor_losses=[], alphas=[],
               alpha_losses=[], returns=[], polyak=[], first_alpha=None)

    # the log-probability check: actor outputs and draws on a fixed batch, before training
    probe = torch.tensor(np.random.RandomState(3).uniform(-1, 1, (64, 3)).astype(np.float32)).to(device)
    with torch.no_grad():
        mean, log_std = actor(probe)
        a, lp, m = actor.get_action(probe)
    out["probe"] = {k: v.cpu().numpy() for k, v in dict(mean=mean, log_std=log_std, action=a, log_prob=lp,
                                                      squashed_mean=m).items()}

    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        if global_step < args.learning_starts:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            actions, _, _ = actor.get_action(torch.Tensor(obs).to(device))
            actions = actions.detach().cpu().numpy()

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        if "final_info" in infos:
            for info in infos["final_info"]:
                if info is not None:
                    out["returns"].append(info["episode"]["r"])
                    break

        real_next_obs = next_obs.copy()
        for idx, trunc in enumerate(truncations):
            if trunc:
                real_next_obs[idx] = infos["final_observation"][idx]
        rb.add(obs, real_next_obs, actions, rewards, terminations, infos)

        obs = next_obs

        if global_step > args.learning_starts:
            data = rb.sample(args.batch_size)
            with torch.no_grad():
                next_state_actions, next_state_log_pi, _ = actor.get_action(data.next_observations)
                qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
                next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * (min_qf_next_target).view(-1)

            qf1_a_values = qf1(data.observations, data.actions).view(-1)
            qf2_a_values = qf2(data.observations, data.actions).view(-1)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
            qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss

            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()
            out["qf_losses"].append(qf_loss.item() / 2.0)

            if global_step % args.policy_frequency == 0:  # TD 3 Delayed update support
                for _ in range(
                    args.policy_frequency
                ):  # compensate for the delay by doing 'actor_update_interval' instead of 1
                    pi, log_pi, _ = actor.get_action(data.observations)
                    qf1_pi = qf1(data.observations, pi)
                    qf2_pi = qf2(data.observations, pi)
                    min_qf_pi = torch.min(qf1_pi, qf2_pi)
                    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()

                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()
                    out["actor_losses"].append(actor_loss.item())

                    if args.autotune:
                        with torch.no_grad():
                            _, log_pi, _ = actor.get_action(data.observations)
                        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()

                        a_optimizer.zero_grad()
                        alpha_loss.backward()
                        if out["first_alpha"] is None:
                            out["first_alpha"] = dict(log_pi_mean=log_pi.mean().item(), grad=log_alpha.grad.item())
                        a_optimizer.step()
                        alpha = log_alpha.exp().item()
                        out["alphas"].append(alpha)
                        out["alpha_losses"].append(alpha_loss.item())

            if global_step % args.target_network_frequency == 0:
                before = [(p.detach().cpu().numpy().copy(), tp.detach().cpu().numpy().copy())
                          for p, tp in zip(qf1.parameters(), qf1_target.parameters())]
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                if not out["polyak"]:
                    out["polyak"] = [(p, tp, q.detach().cpu().numpy().copy())
                                     for (p, tp), q in zip(before, qf1_target.parameters())]
    envs.close()
    with torch.no_grad():
        out["final_mean"] = actor.get_action(probe)[2].cpu().numpy()
    out["params"] = _params(actor) + _params(qf1) + _params(qf1_target)
    return out


def test_cleanrl_sac_continuous_action():
    out = sac_page(lucid)
    assert out["max_action"] == 2.0 and out["target_entropy"] == -1.0
    # log pi(a) of the tanh-squashed Gaussian by a float64 change of variables:
    # a = scale tanh(x) + bias, x ~ N(mean, std); log p(a) = log N(x) - log(scale (1 - tanh^2 x))
    pr = {k: v.astype(np.float64) for k, v in out["probe"].items()}
    std = np.exp(pr["log_std"])
    assert (pr["log_std"] >= -5).all() and (pr["log_std"] <= 2).all()
    y = pr["action"] / 2.0
    x = np.arctanh(np.clip(y, -1 + 1e-7, 1 - 1e-7))
    log_n = -0.5 * ((x - pr["mean"]) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    want = (log_n - np.log(2.0 * (1 - y ** 2) + 1e-6)).sum(1, keepdims=True)
    ok = np.abs(y[:, 0]) < 0.99  # away from the bound, where float32 atanh loses the draw
    assert ok.sum() > 48
    np.testing.assert_allclose(pr["log_prob"][ok], want[ok], rtol=1e-4, atol=2e-4)
    np.testing.assert_allclose(pr["squashed_mean"], 2.0 * np.tanh(pr["mean"]), rtol=1e-5, atol=1e-6)
    # the first alpha update: d/dlog_alpha of -exp(log_alpha) (log_pi + H) at log_alpha = 0,
    # and Adam's first step moves log_alpha by lr against the gradient's sign
    fa = out["first_alpha"]
    assert fa["grad"] == pytest.approx(-(fa["log_pi_mean"] - 1.0), rel=1e-5, abs=1e-6)
    assert np.log(out["alphas"][0]) == pytest.approx(-1e-2 * np.sign(fa["grad"]), rel=1e-3)
    # polyak averaging of the first target update, recomputed
    for p, tp, new in out["polyak"]:
        np.testing.assert_allclose(new, 0.005 * p + 0.995 * tp, rtol=1e-6, atol=1e-7)
    # learning: the deterministic action's squared error to the best action 1.5 obs[0] on the probe
    # batch falls 10x, and the last 5 episodes' returns beat the first 5 (random actions) by >= 3
    best = 1.5 * np.random.RandomState(3).uniform(-1, 1, (64, 3))[:, :1]
    before, after = ((pr["squashed_mean"] - best) ** 2).mean(), ((out["final_mean"] - best) ** 2).mean()
    assert after < 0.1 * before, (before, after)
    assert len(out["qf_losses"]) == 120 - 21 and len(out["returns"]) == 24
    assert np.mean(out["returns"][-5:]) > np.mean(out["returns"][:5]) + 3, out["returns"]


def test_cleanrl_sac_continuous_action_torch_parity():
    torch = _reference_torch()
    with _shared_draws(lucid, 11):
        r = sac_page(lucid, weights_seed=2, total_timesteps=40)
    with _shared_draws(torch, 11):
        t = sac_page(torch, weights_seed=2, total_timesteps=40)
    for k in ("log_prob", "action", "squashed_mean"):
        np.testing.assert_allclose(r["probe"][k], t["probe"][k], rtol=1e-5, atol=1e-5)
    for k in ("qf_losses", "actor_losses", "alphas", "alpha_losses", "returns"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- cleanrl/td3_continuous_action.py
def td3_page(torch, weights_seed=None, total_timesteps=120, hidden=32):
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    args = SimpleNamespace(seed=1, total_timesteps=total_timesteps, learning_rate=3e-3, num_envs=1,
                           buffer_size=1000, gamma=0.99, tau=0.005, batch_size=16, policy_noise=0.2,
                           exploration_noise=0.1, learning_starts=20, policy_frequency=2, noise_clip=0.5)

    class QNetwork(nn.Module):
        def __init__(self, env):
            super().__init__()
            self.fc1 = nn.Linear(
                np.array(env.single_observation_space.shape).prod() + np.prod(env.single_action_space.shape),
                hidden,
            )
            self.fc2 = nn.Linear(hidden, hidden)
            self.fc3 = nn.Linear(hidden, 1)

        def forward(self, x, a):
            x = torch.cat([x, a], 1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    class Actor(nn.Module):
        def __init__(self, env):
            super().__init__()
            self.fc1 = nn.Linear(np.array(env.single_observation_space.shape).prod(), hidden)
            self.fc2 = nn.Linear(hidden, hidden)
            self.fc_mu = nn.Linear(hidden, np.prod(env.single_action_space.shape))
            # action rescaling
            self.register_buffer(
                "action_scale",
                torch.tensor(
                    (env.single_action_space.high - env.single_action_space.low) / 2.0,
                    dtype=torch.float32,
                ),
            )
            self.register_buffer(
                "action_bias",
                torch.tensor(
                    (env.single_action_space.high + env.single_action_space.low) / 2.0,
                    dtype=torch.float32,
                ),
            )

        def forward(self, x):
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = torch.tanh(self.fc_mu(x))
            return x * self.action_scale + self.action_bias

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.empty(0).device  # the script: cuda if available else cpu

    envs = GymnasiumVectorEnv([TargetEnv(args.seed + i) for i in range(args.num_envs)])
    assert isinstance(envs.single_action_space, Box), "only continuous action space is supported"

    actor = Actor(envs).to(device)
    qf1 = QNetwork(envs).to(device)
    qf2 = QNetwork(envs).to(device)
    if weights_seed is not None:
        for k, m in enumerate((actor, qf1, qf2)):
            _overwrite(torch, m, weights_seed + k)
    qf1_target = QNetwork(envs).to(device)
    qf2_target = QNetwork(envs).to(device)
    target_actor = Actor(envs).to(device)
    target_actor.load_state_dict(actor.state_dict())
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.learning_rate)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.learning_rate)

    envs.single_observation_space.dtype = np.float32
    rb = ReplayBuffer(torch, args.buffer_size, envs.single_observation_space, envs.single_action_space, device,
                      n_envs=args.num_envs, handle_timeout_termination=False)
    probe = torch.tensor(np.random.RandomState(3).uniform(-1, 1, (64, 3)).astype(np.float32)).to(device)
    with torch.no_grad():
        out = dict(qf_losses=[], actor_losses=[], returns=[], smoothing=None, polyak=None, explore=[],
                   first_mean=actor(probe).cpu().numpy())

    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        if global_step < args.learning_starts:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            with torch.no_grad():
                actions = actor(torch.Tensor(obs).to(device))
                actions += torch.normal(0, actor.action_scale * args.exploration_noise)
                actions = actions.cpu().numpy().clip(envs.single_action_space.low, envs.single_action_space.high)
            out["explore"].append(actions.copy())

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        if "final_info" in infos:
            for info in infos["final_info"]:
                if info is not None:
                    out["returns"].append(info["episode"]["r"])
                    break

        real_next_obs = next_obs.copy()
        for idx, trunc in enumerate(truncations):
            if trunc:
                real_next_obs[idx] = infos["final_observation"][idx]
        rb.add(obs, real_next_obs, actions, rewards, terminations, infos)

        obs = next_obs

        if global_step > args.learning_starts:
            data = rb.sample(args.batch_size)
            with torch.no_grad():
                clipped_noise = (torch.randn_like(data.actions, device=device) * args.policy_noise).clamp(
                    -args.noise_clip, args.noise_clip
                ) * target_actor.action_scale

                next_state_actions = (target_actor(data.next_observations) + clipped_noise).clamp(
                    envs.single_action_space.low[0], envs.single_action_space.high[0]
                )
                qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                min_qf_next_target = torch.min(qf1_next_target, qf2_next_target)
                next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * (min_qf_next_target).view(-1)
                if out["smoothing"] is None:
                    out["smoothing"] = dict(noise=clipped_noise.cpu().numpy(),
                                            mu=target_actor(data.next_observations).cpu().numpy(),
                                            next_actions=next_state_actions.cpu().numpy(),
                                            q1=qf1_next_target.cpu().numpy(), q2=qf2_next_target.cpu().numpy(),
                                            rewards=data.rewards.cpu().numpy(), dones=data.dones.cpu().numpy(),
                                            next_q=next_q_value.cpu().numpy())

            qf1_a_values = qf1(data.observations, data.actions).view(-1)
            qf2_a_values = qf2(data.observations, data.actions).view(-1)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
            qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss

            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()
            out["qf_losses"].append(qf_loss.item() / 2.0)

            if global_step % args.policy_frequency == 0:
                actor_loss = -qf1(data.observations, actor(data.observations)).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()
                out["actor_losses"].append(actor_loss.item())

                before = [(p.detach().cpu().numpy().copy(), tp.detach().cpu().numpy().copy())
                          for p, tp in zip(actor.parameters(), target_actor.parameters())]
                # update the target network
                for param, target_param in zip(actor.parameters(), target_actor.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                if out["polyak"] is None:
                    out["polyak"] = [(p, tp, q.detach().cpu().numpy().copy())
                                     for (p, tp), q in zip(before, target_actor.parameters())]
    envs.close()
    with torch.no_grad():
        out["final_mean"] = actor(probe).cpu().numpy()
    out["params"] = _params(actor) + _params(qf1) + _params(target_actor)
    return out


def test_cleanrl_td3_continuous_action():
    out = td3_page(lucid)
    sm = out["smoothing"]
    # target policy smoothing: N(0, 0.2) noise clipped to +-0.5, times action_scale 2; the action clamped
    assert np.abs(sm["noise"]).max() <= 1.0 + 1e-6 and np.abs(sm["noise"]).std() > 0.1
    np.testing.assert_allclose(sm["next_actions"], np.clip(sm["mu"] + sm["noise"], -2, 2), rtol=1e-6, atol=1e-6)
    want = sm["rewards"][:, 0] + (1 - sm["dones"][:, 0]) * 0.99 * np.minimum(sm["q1"], sm["q2"])[:, 0]
    np.testing.assert_allclose(sm["next_q"], want, rtol=1e-6, atol=1e-6)
    for p, tp, new in out["polyak"]:
        np.testing.assert_allclose(new, 0.005 * p + 0.995 * tp, rtol=1e-6, atol=1e-7)
    explore = np.concatenate(out["explore"])
    assert explore.shape == (100, 1) and np.abs(explore).max() <= 2.0
    assert len(out["qf_losses"]) == 99 and len(out["actor_losses"]) == len(range(22, 120, 2))
    best = 1.5 * np.random.RandomState(3).uniform(-1, 1, (64, 3))[:, :1]
    before, after = ((out["first_mean"] - best) ** 2).mean(), ((out["final_mean"] - best) ** 2).mean()
    assert after < 0.2 * before, (before, after)
    assert np.mean(out["returns"][-5:]) > np.mean(out["returns"][:4]) + 2, out["returns"]


def test_cleanrl_td3_continuous_action_torch_parity():
    torch = _reference_torch()
    with _shared_draws(lucid, 13):
        r = td3_page(lucid, weights_seed=4, total_timesteps=50)
    with _shared_draws(torch, 13):
        t = td3_page(torch, weights_seed=4, total_timesteps=50)
    for k in ("qf_losses", "actor_losses", "returns"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-4, atol=1e-5, err_msg=k)
    np.testing.assert_allclose(np.concatenate(r["explore"]), np.concatenate(t["explore"]), rtol=1e-5, atol=1e-6)
    for a, b in zip(r["params"], t["params"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
