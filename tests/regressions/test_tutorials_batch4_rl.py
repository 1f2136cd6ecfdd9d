"""PyTorch's "Reinforcement Learning (DQN) Tutorial" run on Lucid (``import lucid as torch``):
replay memory, epsilon-greedy ``select_action``, ``optimize_model`` (``gather``, boolean-mask
assignment, ``SmoothL1Loss``, ``AdamW(amsgrad=True)``, ``clip_grad_value_``) and the soft update
of the target network through state dicts. Gymnasium's CartPole is replaced by a small
hand-written CartPole (the same physics, a short time limit); the network is shrunk.
"""
import math
import random
from collections import deque, namedtuple
from itertools import count

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401


class _ActionSpace:
    def __init__(self, n, rng):
        self.n, self.rng = n, rng

    def sample(self):
        return self.rng.randrange(self.n)


class CartPole:
    """Gymnasium's CartPole-v1 dynamics (Euler steps), episodes cut at ``max_steps``."""

    def __init__(self, seed, max_steps=40):
        self.rng = random.Random(seed)
        self.action_space = _ActionSpace(2, self.rng)
        self.max_steps = max_steps

    def reset(self):
        self.s = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        self.t = 0
        return list(self.s), {}

    def step(self, action):
        x, x_dot, th, th_dot = self.s
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(th), math.sin(th)
        temp = (force + 0.05 * th_dot ** 2 * sin) / 1.1
        th_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * th_acc * cos / 1.1
        tau = 0.02
        self.s = [x + tau * x_dot, x_dot + tau * x_acc, th + tau * th_dot, th_dot + tau * th_acc]
        self.t += 1
        terminated = abs(self.s[0]) > 2.4 or abs(self.s[2]) > 12 * 2 * math.pi / 360
        truncated = self.t >= self.max_steps
        return list(self.s), 1.0, terminated, truncated, {}


def dqn(torch, num_episodes=8, seed=0):
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    device = torch.empty(0).device
    env = CartPole(seed)
    rand = random.Random(seed + 1)

    Transition = namedtuple('Transition', ('state', 'action', 'next_state', 'reward'))

    class ReplayMemory(object):
        def __init__(self, capacity):
            self.memory = deque([], maxlen=capacity)

        def push(self, *args):
            """Save a transition"""
            self.memory.append(Transition(*args))

        def sample(self, batch_size):
            return rand.sample(self.memory, batch_size)

        def __len__(self):
            return len(self.memory)

    class DQN(nn.Module):
        def __init__(self, n_observations, n_actions):
            super(DQN, self).__init__()
            self.layer1 = nn.Linear(n_observations, 32)
            self.layer2 = nn.Linear(32, 32)
            self.layer3 = nn.Linear(32, n_actions)

        def forward(self, x):
            x = F.relu(self.layer1(x))
            x = F.relu(self.layer2(x))
            return self.layer3(x)

    BATCH_SIZE = 16
    GAMMA = 0.99
    EPS_START = 0.9
    EPS_END = 0.01
    EPS_DECAY = 250
    TAU = 0.005
    LR = 3e-3

    n_actions = env.action_space.n
    state, info = env.reset()
    n_observations = len(state)

    policy_net = DQN(n_observations, n_actions).to(device)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in policy_net.parameters():
            p.copy_(torch.tensor(rng.normal(scale=0.3, size=tuple(p.shape)), dtype=p.dtype))
    target_net = DQN(n_observations, n_actions).to(device)
    target_net.load_state_dict(policy_net.state_dict())

    optimizer = optim.AdamW(policy_net.parameters(), lr=LR, amsgrad=True)
    memory = ReplayMemory(10000)
    steps_done = 0
    actions = []

    def select_action(state):
        nonlocal steps_done
        sample = rand.random()
        eps_threshold = EPS_END + (EPS_START - EPS_END) * math.exp(-1. * steps_done / EPS_DECAY)
        steps_done += 1
        if sample > eps_threshold:
            with torch.no_grad():
                return policy_net(state).max(1).indices.view(1, 1)
        else:
            return torch.tensor([[env.action_space.sample()]], device=device, dtype=torch.long)

    episode_durations, losses = [], []

    def optimize_model():
        if len(memory) < BATCH_SIZE:
            return
        transitions = memory.sample(BATCH_SIZE)
        batch = Transition(*zip(*transitions))
        non_final_mask = torch.tensor(tuple(map(lambda s: s is not None, batch.next_state)), device=device,
                                      dtype=torch.bool)
        non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
        state_batch = torch.cat(batch.state)
        action_batch = torch.cat(batch.action)
        reward_batch = torch.cat(batch.reward)
        state_action_values = policy_net(state_batch).gather(1, action_batch)
        next_state_values = torch.zeros(BATCH_SIZE, device=device)
        with torch.no_grad():
            next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
        expected_state_action_values = (next_state_values * GAMMA) + reward_batch
        criterion = nn.SmoothL1Loss()
        loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
        optimizer.step()
        losses.append(loss.item())

    for i_episode in range(num_episodes):
        state, info = env.reset()
        state = torch.tensor(state, dtype=torch.float32, device=device).unsqueeze(0)
        for t in count():
            action = select_action(state)
            actions.append(action.item())
            observation, reward, terminated, truncated, _ = env.step(action.item())
            reward = torch.tensor([reward], device=device)
            done = terminated or truncated
            if terminated:
                next_state = None
            else:
                next_state = torch.tensor(observation, dtype=torch.float32, device=device).unsqueeze(0)
            memory.push(state, action, next_state, reward)
            state = next_state
            optimize_model()
            target_net_state_dict = target_net.state_dict()
            policy_net_state_dict = policy_net.state_dict()
            for key in policy_net_state_dict:
                target_net_state_dict[key] = policy_net_state_dict[key] * TAU + target_net_state_dict[key] * (1 - TAU)
            target_net.load_state_dict(target_net_state_dict)
            if done:
                episode_durations.append(t + 1)
                break
    gap = max(float((p - q).detach().abs().max()) for p, q in zip(policy_net.parameters(), target_net.parameters()))
    return dict(durations=episode_durations, losses=losses, actions=actions, steps=steps_done, gap=gap,
                target=[p.detach().cpu().numpy() for p in target_net.parameters()])


def test_dqn():
    out = dqn(lucid, num_episodes=8)
    assert len(out["durations"]) == 8 and sum(out["durations"]) == out["steps"] == len(out["actions"])
    assert all(1 <= d <= 40 for d in out["durations"])
    assert len(out["losses"]) == out["steps"] - 15  # optimize_model starts once 16 transitions are stored
    assert all(np.isfinite(out["losses"]))
    assert set(out["actions"]) == {0, 1}
    assert 0 < out["gap"] < 0.5  # the target trails the policy by the soft updates


def test_dqn_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = dqn(lucid, num_episodes=5), dqn(torch, num_episodes=5)
    assert lo["actions"] == to["actions"] and lo["durations"] == to["durations"]
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=1e-4, atol=1e-6)
    for a, b in zip(lo["target"], to["target"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ------------------------------------------------ Neural Transfer (style transfer with LBFGS)

def style_transfer(torch, num_steps=6, seed=0):
    nn, optim, F = torch.nn, torch.optim, torch.nn.functional
    device = torch.empty(0).device
    rng = np.random.default_rng(seed)
    style_img = torch.tensor(rng.random((1, 3, 16, 16)), dtype=torch.float32).to(device)
    content_img = torch.tensor(rng.random((1, 3, 16, 16)), dtype=torch.float32).to(device)

    class ContentLoss(nn.Module):
        def __init__(self, target,):
            super(ContentLoss, self).__init__()
            self.target = target.detach()

        def forward(self, input):
            self.loss = F.mse_loss(input, self.target)
            return input

    def gram_matrix(input):
        a, b, c, d = input.size()
        features = input.view(a * b, c * d)
        G = torch.mm(features, features.t())
        return G.div(a * b * c * d)

    class StyleLoss(nn.Module):
        def __init__(self, target_feature):
            super(StyleLoss, self).__init__()
            self.target = gram_matrix(target_feature).detach()

        def forward(self, input):
            G = gram_matrix(input)
            self.loss = F.mse_loss(G, self.target)
            return input

    # A small randomly initialised VGG-like network in place of the pretrained VGG19.
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                        nn.MaxPool2d(2, 2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()).to(device).eval()
    with torch.no_grad():
        for p in cnn.parameters():
            p.copy_(torch.tensor(rng.normal(scale=0.3, size=tuple(p.shape)), dtype=p.dtype))
    cnn_normalization_mean = torch.tensor([0.485, 0.456, 0.406]).to(device)
    cnn_normalization_std = torch.tensor([0.229, 0.224, 0.225]).to(device)

    class Normalization(nn.Module):
        def __init__(self, mean, std):
            super(Normalization, self).__init__()
            self.mean = torch.tensor(mean).view(-1, 1, 1)
            self.std = torch.tensor(std).view(-1, 1, 1)

        def forward(self, img):
            return (img - self.mean) / self.std

    content_layers_default = ['conv_4']
    style_layers_default = ['conv_1', 'conv_2', 'conv_3', 'conv_4']

    def get_style_model_and_losses(cnn, normalization_mean, normalization_std, style_img, content_img,
                                   content_layers=content_layers_default, style_layers=style_layers_default):
        normalization = Normalization(normalization_mean, normalization_std)
        content_losses = []
        style_losses = []
        model = nn.Sequential(normalization)
        i = 0  # increment every time we see a conv
        for layer in cnn.children():
            if isinstance(layer, nn.Conv2d):
                i += 1
                name = 'conv_{}'.format(i)
            elif isinstance(layer, nn.ReLU):
                name = 'relu_{}'.format(i)
                layer = nn.ReLU(inplace=False)
            elif isinstance(layer, nn.MaxPool2d):
                name = 'pool_{}'.format(i)
            elif isinstance(layer, nn.BatchNorm2d):
                name = 'bn_{}'.format(i)
            else:
                raise RuntimeError('Unrecognized layer: {}'.format(layer.__class__.__name__))
            model.add_module(name, layer)
            if name in content_layers:
                target = model(content_img).detach()
                content_loss = ContentLoss(target)
                model.add_module("content_loss_{}".format(i), content_loss)
                content_losses.append(content_loss)
            if name in style_layers:
                target_feature = model(style_img).detach()
                style_loss = StyleLoss(target_feature)
                model.add_module("style_loss_{}".format(i), style_loss)
                style_losses.append(style_loss)
        for i in range(len(model) - 1, -1, -1):
            if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
                break
        model = model[:(i + 1)]
        return model, style_losses, content_losses

    input_img = content_img.clone()

    def get_input_optimizer(input_img):
        optimizer = optim.LBFGS([input_img])
        return optimizer

    def run_style_transfer(cnn, normalization_mean, normalization_std, content_img, style_img, input_img,
                           num_steps=300, style_weight=1000000, content_weight=1):
        model, style_losses, content_losses = get_style_model_and_losses(
            cnn, normalization_mean, normalization_std, style_img, content_img)
        input_img.requires_grad_(True)
        model.eval()
        model.requires_grad_(False)
        optimizer = get_input_optimizer(input_img)
        run = [0]
        history = []
        while run[0] <= num_steps:
            def closure():
                with torch.no_grad():
                    input_img.clamp_(0, 1)
                optimizer.zero_grad()
                model(input_img)
                style_score = 0
                content_score = 0
                for sl in style_losses:
                    style_score += sl.loss
                for cl in content_losses:
                    content_score += cl.loss
                style_score *= style_weight
                content_score *= content_weight
                loss = style_score + content_score
                loss.backward()
                run[0] += 1
                history.append((style_score.item(), content_score.item()))
                return style_score + content_score
            optimizer.step(closure)
        with torch.no_grad():
            input_img.clamp_(0, 1)
        return input_img, history, model

    output, history, model = run_style_transfer(cnn, cnn_normalization_mean, cnn_normalization_std,
                                                content_img, style_img, input_img, num_steps=num_steps)
    return dict(history=history, out=output.detach().cpu().numpy(),
                names=[n for n, _ in model.named_children()])


def test_neural_style_transfer():
    out = style_transfer(lucid, num_steps=30)
    assert out["names"] == ["0", "conv_1", "style_loss_1", "relu_1", "conv_2", "style_loss_2", "relu_2", "pool_2",
                            "conv_3", "style_loss_3", "relu_3", "conv_4", "content_loss_4", "style_loss_4"]
    first, last = out["history"][0], out["history"][-1]
    assert first[1] == 0.0  # the input starts as the content image
    assert sum(last) < 0.2 * sum(first)
    assert out["out"].min() >= 0.0 and out["out"].max() <= 1.0


def test_neural_style_transfer_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = style_transfer(lucid, num_steps=3), style_transfer(torch, num_steps=3)
    assert lo["names"] == to["names"]
    np.testing.assert_allclose(lo["history"][:8], to["history"][:8], rtol=2e-3, atol=1e-5)
