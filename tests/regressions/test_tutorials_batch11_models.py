"""PyTorch tutorials run on Lucid (``import lucid as torch``), eleventh batch, models:

- "Reinforcement Learning (A3C) Tutorial" (intermediate): ``ActorCritic`` with its
  ``Sequential(OrderedDict(...))`` trunk registered again through ``add_module``, ``softmax`` /
  ``log_softmax`` methods, the ``Player`` returns (``R[-1, 0] = r + gamma * v_`` with a one-element
  tensor ``v_``, ``torch.tensor`` of a list of arrays), ``share_memory``, ``RMSprop(momentum=.9)``
  stepping the global model on the local model's gradients (``p_glo.grad = p_loc.grad``). One
  actor-learner runs in this process (the page starts several with ``torch.multiprocessing``);
  gym's CartPole-v0 is a hand-written CartPole.
- "Train a Mario-playing RL Agent" (intermediate): ``MarioNet`` (online conv net and its
  ``copy.deepcopy`` frozen target), epsilon-greedy ``act`` (``torch.argmax(..., axis=1)``),
  ``cache``/``recall`` (``map(torch.stack, zip(*batch))``), ``td_estimate``/``td_target`` (a NumPy
  ``arange`` and a tensor as the index pair, ``@torch.no_grad()`` on a method, ``done.float()``),
  ``SmoothL1Loss`` + ``Adam``, ``sync_Q_target`` and ``save``. The NES emulator and its wrappers
  become random 4x84x84 frame stacks whose brightness follows the action.
- "Autoencoder: A Deep Dive" (beginner): the linear autoencoders (``F.leaky_relu``, ``F.sigmoid``),
  the convolutional ones (``nn.Unflatten``, ``ConvTranspose2d`` with strides and padding, for
  FashionMNIST and CIFAR10 shapes), ``inference_mode``, the noisy-input test.
- "Transformer building blocks" (intermediate, "Accelerating PyTorch Transformers by replacing
  nn.Transformer with Nested Tensors and torch.compile()"): the ``MultiHeadAttention`` over jagged
  nested tensors (packed projection, ``unflatten``/``transpose``, causal SDPA) against
  ``nn.MultiheadAttention`` on the padded batch with ``key_padding_mask`` and the page's 3-d
  ``attn_mask`` (self and cross attention, forward and backward), the packed input projection and
  the (packed) SwiGLU FFN. Its "FlexAttention + NJT" section stops at its first call in both
  libraries: PyTorch 2.13 refuses nested inputs to ``flex_attention`` and has no
  ``create_nested_block_mask`` any more (the page predates that).
- "nn package" (beginner, "PyTorch for former Torch users"): ``MNISTConvNet`` with a forward hook and
  the deprecated ``register_backward_hook`` on ``conv2`` (its ``grad_input`` is the convolution
  node's: input, weight and bias gradients), and the ``RNN`` reusing one ``nn.Linear`` per step.
- "Unconditional Image Generation With DDIM Model Tutorial" (advanced): the ``DiffUnet`` (residual
  blocks with ``GroupNorm(32)``/``SiLU``, ``nn.Sequential.insert``, bare ``nn.Module()`` holders,
  ``AttnBlock`` through ``bmm``, ``F.pad`` + stride-2 conv, nearest ``interpolate``,
  ``torch.cat(..., axis=1)``), the cosv2 schedule, ``DDIMSampler`` (``cumprod``, ``q_sample``,
  ``p_sample`` under ``@torch.no_grad()``, ``treshold_sample``'s ``quantile`` and tensor-bounded
  ``clamp``), ``DiffusionModel`` (l1 loss, the EMA through ``.data``, save/load) and ``train_epoch``
  with ``clip_grad_norm_``; its random draws come from NumPy in both libraries.
- "SimCLR Tutorial" (advanced): the two-view generator, ``random_split``, the ``SimCLR`` model's
  two-view forward, ``contrastive_loss`` (``similarity_matrix[~MASK].view(SHAPE, -1)``,
  ``LABELS.bool()`` masks, positives first), ``CrossEntropyLoss`` + ``Adam(lr=1e-1)``, then the
  frozen-encoder ``Classification`` with ``F.normalize``d logits and the test accuracy
  (torchvision's resnet18 becomes a small CNN, STL10 random images, the augmentations NumPy noise).
- "Speech Command Classification with torchaudio" (intermediate), from the labels on: the
  ``pad_sequence`` collate (``.t()``, ``batch_first``, ``permute``), M5 (``Conv1d(k=80, s=16)``,
  ``BatchNorm1d``, ``MaxPool1d``, ``F.avg_pool1d(x, x.shape[-1])``, ``log_softmax(dim=2)``),
  ``Adam(weight_decay)`` + ``StepLR``, ``F.nll_loss(output.squeeze(), target)``, test and predict
  (SPEECHCOMMANDS becomes 16 kHz tones of ragged lengths, Resample a two-tap mean).
- "Visualizing the Mathematics Behind Neural Network Training" (beginner): ``nn.Linear`` against
  ``x @ W.T + b``, ReLU and dead neurons, the chain rule, ``grad_fn.next_functions`` walked to
  ``AccumulateGrad``, one SGD step by hand, fitting ``y = 3x + 1`` and a 3-feature regression.

Data sets and environments are synthetic, sizes are shrunk, plots and timings left out. Each page is
a function of the module it is handed as ``torch``; the parity tests run the same text on PyTorch
(where it is installed) from the same NumPy-drawn weights and compare the numbers.

Found here: ``flex_attention`` on nested inputs failed deep inside (a ValueError about key/value
shapes, or matmul's "nested operands must share their structure"); it now raises PyTorch 2.13's
NotImplementedError up front; ``Module.register_backward_hook`` was ``register_full_backward_hook`` under
another name (``grad_input`` the module's input gradients only; PyTorch hands the non-full hook the
gradients of the inputs of the node that made the output, warns as it does, and refuses to mix the
two kinds on one module: all three now as PyTorch, NOTE [Non-full backward hooks] in
``lucid/nn/module.py``). Port notes: ``from torch.nn import Sequential`` inside a function imports
the real ``torch`` whatever the local name ``torch`` is bound to, so the A3C page's ``from ...
import`` lines become attribute reads here. PyTorch's CPU
build has no SDPA kernel for the page's nested MultiHeadAttention ("No viable backend"; it runs
on CUDA), so its parity run compares the padded ``nn.MultiheadAttention`` half only.
"""
import copy
import math
import os
import random
import re
import sys
from collections import OrderedDict, deque
from importlib import import_module
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pytest

import lucid
import lucid.nested  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.nn.attention.flex_attention  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.optim.rmsprop  # noqa: F401
import lucid.utils.data  # noqa: F401


def _reference_torch():
    """PyTorch for the parity runs, on one thread (tiny models; its thread pool only contends)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _set_from_numpy(torch, model, seed, scale=0.05):
    """Every parameter drawn by NumPy (same start on both libraries), in ``named_parameters`` order."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))


def _set_a3c(torch, model, seed):
    _set_from_numpy(torch, model, seed, scale=0.3)


def _cpu_only(why):
    if lucid.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(lucid.get_default_device()))


def npy(t):
    return np.array(t.detach().cpu().numpy())


# ------------------------------------------------------------------------------------ A3C

class CartPole:
    """Gym's CartPole-v0 dynamics (Euler), a fixed start per seed, episodes cut at max_steps."""
    def __init__(self, rng, max_steps=12):
        self.rng, self.max_steps = rng, max_steps

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return np.array(self.state)

    def step(self, action):
        x, x_dot, th, th_dot = self.state
        force = 10.0 if action == 1 else -10.0
        g, mc, mp, l, tau = 9.8, 1.0, 0.1, 0.5, 0.02
        total = mc + mp
        temp = (force + mp * l * th_dot ** 2 * math.sin(th)) / total
        thacc = (g * math.sin(th) - math.cos(th) * temp) / (l * (4.0 / 3.0 - mp * math.cos(th) ** 2 / total))
        xacc = temp - mp * l * thacc * math.cos(th) / total
        x, x_dot = x + tau * x_dot, x_dot + tau * xacc
        th, th_dot = th + tau * th_dot, th_dot + tau * thacc
        self.state = np.array([x, x_dot, th, th_dot])
        self.steps += 1
        done = bool(abs(x) > 2.4 or abs(th) > 12 * 2 * math.pi / 360 or self.steps >= self.max_steps)
        return np.array(self.state), 1.0, done, {}


def a3c(torch, set_params, iterations=6, tmax=5, seed=1032):
    """reinforcement_a3c_tutorial.py, one actor-learner in this process (mp/gym/tensorboard left out)."""
    Sequential, Linear, ReLU = torch.nn.Sequential, torch.nn.Linear, torch.nn.ReLU  # from torch.nn import ...
    RMSprop = import_module(torch.__name__ + ".optim.rmsprop").RMSprop  # from torch.optim.rmsprop import RMSprop
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = torch.device("cpu")
    state_size = 4
    out = {"losses": [], "actions": [], "R": [], "batches": []}

    class ActorCritic(torch.nn.Module):
        def __init__(self, layers: List[int]):
            super(ActorCritic, self).__init__()
            current_size = state_size
            self.layers_ = []
            for i, size in enumerate(layers):
                next_size = size
                self.layers_.append((f"layer_{i}", Linear(current_size, next_size)))
                self.layers_.append((f"relu_{i}", ReLU()))
                current_size = next_size
            self.bottom = Sequential(OrderedDict(self.layers_))
            self.add_module("bottom", self.bottom)
            self.policy_layer_ = Linear(current_size, 2)
            self.value_layer_ = Linear(current_size, 1)

        def forward(self, x_state):
            y = self.bottom(x_state)
            logit = self.policy_layer_(y)
            value = self.value_layer_(y)
            return logit, value

        def prob(self, x_state):
            logit, _ = self.forward(x_state)
            if len(logit.shape) > 1:
                return logit.softmax(dim=1)
            else:
                return logit.softmax(dim=0)

        def value(self, x_state):
            _, value_ = self.forward(x_state)
            return value_

        def loss(self, x_state, x_rewards, x_actions):
            logit, value = self.forward(x_state)
            value_residual = x_rewards - value
            policy_loss = -torch.sum(
                logit.log_softmax(dim=1) * x_actions, dim=1) * \
                value_residual.clone().detach().reshape((-1,))
            value_loss = value_residual.pow(2.0)
            return policy_loss.mean() + value_loss.mean()

    class Player(object):
        def __init__(self, gamma: float, t_max: int):
            self.gamma_ = gamma
            self.t_max_ = t_max
            self.t = 1
            self.t_start = 1
            self.env_ = CartPole(np.random.default_rng(seed))
            self.s_l_: List[np.array] = list()
            self.s_ = self.env_.reset()
            self.a_l_: List[List[float]] = list()
            self.r_l_: List[float] = list()
            self.total_reward_: float = 0.0
            self.terminated_: bool = False

        def current_state(self):
            return self.s_

        def terminated(self):
            return self.terminated_

        def reward(self):
            return self.total_reward_

        def restart(self):
            self.total_reward_ = 0.0
            self.terminated_ = False
            self.s_l_: List[np.array] = list()
            self.a_l_: List[List[float]] = list()
            self.r_l_: List[float] = list()
            self.s_ = self.env_.reset()
            self.t = self.t_start

        def play(self, action: int) -> Optional[np.ndarray]:
            if self.terminated_:
                raise Exception("Cannot play in terminated state without restarting")
            s_next, r_, terminated, _ = self.env_.step(action)
            self.terminated_ = terminated
            self.total_reward_ += r_
            self.r_l_.append(r_)
            self.a_l_.append([0.0, 0.0])
            self.a_l_[-1][action] = 1.0
            self.s_l_.append(self.s_)
            self.s_ = s_next
            self.t += 1
            if self.terminated_ or (self.t - self.t_start == self.t_max_):
                self.t = self.t_start
                return s_next
            else:
                return None

        def returns(self, start_point: Optional["torch.Tensor"] = None) -> Dict[str, "torch.Tensor"]:
            if self.terminated() and (start_point is not None):
                raise ValueError("Cannot supply a start point when episode is terminated")
            v_ = torch.tensor([0.0], device=device)
            if start_point is not None:
                v_ = start_point
            R = torch.zeros(size=(len(self.r_l_), 1), dtype=torch.float32, device=device)
            R[-1, 0] = self.r_l_[-1] + self.gamma_ * v_
            idx = -2
            while idx >= -len(self.r_l_):
                R[idx, 0] = self.r_l_[idx] + self.gamma_ * R[idx+1, 0]
                idx -= 1
            out_s = torch.tensor(self.s_l_, dtype=torch.float32, device=device)
            out_a = torch.tensor(self.a_l_, device=device)
            self.s_l_ = list()
            self.a_l_ = list()
            self.r_l_ = list()
            return {"R": R, "s": out_s, "a": out_a}

    actor_critic_architecture = [16, 8]
    actor_critic = ActorCritic(actor_critic_architecture)
    actor_critic.to(device=device)
    set_params(torch, actor_critic, seed)
    out["names"] = [n for n, _ in actor_critic.named_parameters()]
    actor_critic.share_memory()
    lr, player_length, player_gamma = 0.002, tmax, 0.995

    # playing_process(0), its body as written; the global step counter is a plain int here
    player = Player(player_gamma, player_length)
    optimizer = RMSprop(actor_critic.parameters(), momentum=.9, lr=lr)
    local_model = ActorCritic(actor_critic_architecture)
    local_model.to(device)
    global_step = 1
    while global_step <= iterations:
        local_model.load_state_dict(actor_critic.state_dict())
        while True:
            prob = local_model.prob(torch.tensor(player.current_state(),
                                                 dtype=torch.float32)) \
                .detach().numpy()
            a = np.random.choice([0, 1], p=prob)
            out["actions"].append(int(a))
            outcome = player.play(a)
            if outcome is not None:
                start_value = None
                if not player.terminated():
                    start_value = local_model.value(torch.tensor(outcome, dtype=torch.float32)).clone().detach()
                tensor_dict = player.returns(start_value)
                out["R"].append(tensor_dict["R"].detach().numpy().copy())
                out["batches"].append((tensor_dict["s"].numpy().copy(), tensor_dict["a"].numpy().copy()))
                loss = local_model.loss(x_state=tensor_dict['s'],
                                        x_actions=tensor_dict['a'],
                                        x_rewards=tensor_dict['R'])
                optimizer.zero_grad()
                local_model.zero_grad()
                loss.backward()
                for p_glo, p_loc in zip(actor_critic.parameters(), local_model.parameters()):
                    p_glo.grad = p_loc.grad
                optimizer.step()
                out["losses"].append(loss.item())
                if player.terminated():
                    player.restart()
                global_step += 1
                break
    out["params"] = [p.detach().numpy().copy() for p in actor_critic.parameters()]
    return out


# ------------------------------------------------------------------------------------ Mario

class LazyFrames:
    """gym's FrameStack observation: ``__array__`` stacks the frames."""
    def __init__(self, frames):
        self._frames = list(frames)

    def __array__(self, dtype=None, copy=None):
        return np.stack(self._frames).astype(np.float32)


class MarioEnv:
    """SkipFrame + GrayScale + Resize(84) + FrameStack(4) of SuperMarioBros, as random 84x84 frames in [0, 1]:
    action 1 ('right') brightens the next frame and pays 1, the others pay 0; episodes last ``length`` steps."""
    def __init__(self, seed, length=6):
        self.rng, self.length = np.random.default_rng(seed), length

    def reset(self):
        self.t = 0
        self.frames = deque([self.rng.random((84, 84)) * 0.5 for _ in range(4)], maxlen=4)
        return LazyFrames(self.frames)

    def step(self, action):
        self.t += 1
        self.frames.append(self.rng.random((84, 84)) * 0.5 + (0.5 if action == 1 else 0.0))
        return LazyFrames(self.frames), float(action == 1), self.t >= self.length, {"flag_get": False}


def mario(torch, set_params, save_dir, episodes=2, seed=0):
    """mario_rl_tutorial.py from the agent on (gym-super-mario-bros, its wrappers and plots left out)."""
    nn = torch.nn
    np.random.seed(seed)
    random.seed(seed)
    printed = []
    print = printed.append  # noqa: A001

    class MarioNet(nn.Module):
        def __init__(self, input_dim, output_dim):
            super().__init__()
            c, h, w = input_dim
            if h != 84:
                raise ValueError(f"Expecting input height: 84, got: {h}")
            if w != 84:
                raise ValueError(f"Expecting input width: 84, got: {w}")
            self.online = nn.Sequential(
                nn.Conv2d(in_channels=c, out_channels=32, kernel_size=8, stride=4),
                nn.ReLU(),
                nn.Conv2d(in_channels=32, out_channels=64, kernel_size=4, stride=2),
                nn.ReLU(),
                nn.Conv2d(in_channels=64, out_channels=64, kernel_size=3, stride=1),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(3136, 512),
                nn.ReLU(),
                nn.Linear(512, output_dim),
            )
            self.target = copy.deepcopy(self.online)
            for p in self.target.parameters():
                p.requires_grad = False

        def forward(self, input, model):
            if model == "online":
                return self.online(input)
            elif model == "target":
                return self.target(input)

    class Mario:
        def __init__(self, state_dim, action_dim, save_dir):
            self.state_dim = state_dim
            self.action_dim = action_dim
            self.save_dir = save_dir
            self.use_cuda = False  # torch.cuda.is_available(); the CPU branch as written
            self.net = MarioNet(self.state_dim, self.action_dim).float()
            set_params(torch, self.net.online, seed)  # the same start in both libraries
            self.net.target.load_state_dict(self.net.online.state_dict())
            self.exploration_rate = 1
            self.exploration_rate_decay = 0.8  # 0.99999975, shrunk with the run
            self.exploration_rate_min = 0.1
            self.curr_step = 0
            self.save_every = 6  # 5e5

        def act(self, state):
            if np.random.rand() < self.exploration_rate:
                action_idx = np.random.randint(self.action_dim)
            else:
                state = state.__array__()
                state = torch.tensor(state)
                state = state.unsqueeze(0)
                action_values = self.net(state, model="online")
                action_idx = torch.argmax(action_values, axis=1).item()
            self.exploration_rate *= self.exploration_rate_decay
            self.exploration_rate = max(self.exploration_rate_min, self.exploration_rate)
            self.curr_step += 1
            return action_idx

    class Mario(Mario):  # subclassing for continuity
        def __init__(self, state_dim, action_dim, save_dir):
            super().__init__(state_dim, action_dim, save_dir)
            self.memory = deque(maxlen=100000)
            self.batch_size = 4  # 32

        def cache(self, state, next_state, action, reward, done):
            state = state.__array__()
            next_state = next_state.__array__()
            state = torch.tensor(state)
            next_state = torch.tensor(next_state)
            action = torch.tensor([action])
            reward = torch.tensor([reward])
            done = torch.tensor([done])
            self.memory.append((state, next_state, action, reward, done,))

        def recall(self):
            batch = random.sample(self.memory, self.batch_size)
            state, next_state, action, reward, done = map(torch.stack, zip(*batch))
            return state, next_state, action.squeeze(), reward.squeeze(), done.squeeze()

    class Mario(Mario):
        def __init__(self, state_dim, action_dim, save_dir):
            super().__init__(state_dim, action_dim, save_dir)
            self.gamma = 0.9

        def td_estimate(self, state, action):
            current_Q = self.net(state, model="online")[
                np.arange(0, self.batch_size), action
            ]  # Q_online(s,a)
            return current_Q

        @torch.no_grad()
        def td_target(self, reward, next_state, done):
            next_state_Q = self.net(next_state, model="online")
            best_action = torch.argmax(next_state_Q, axis=1)
            next_Q = self.net(next_state, model="target")[
                np.arange(0, self.batch_size), best_action
            ]
            return (reward + (1 - done.float()) * self.gamma * next_Q).float()

    class Mario(Mario):
        def __init__(self, state_dim, action_dim, save_dir):
            super().__init__(state_dim, action_dim, save_dir)
            self.optimizer = torch.optim.Adam(self.net.parameters(), lr=0.00025)
            self.loss_fn = torch.nn.SmoothL1Loss()

        def update_Q_online(self, td_estimate, td_target):
            loss = self.loss_fn(td_estimate, td_target)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            return loss.item()

        def sync_Q_target(self):
            self.net.target.load_state_dict(self.net.online.state_dict())

    class Mario(Mario):
        def save(self):
            save_path = (
                self.save_dir / f"mario_net_{int(self.curr_step // self.save_every)}.chkpt"
            )
            torch.save(
                dict(model=self.net.state_dict(), exploration_rate=self.exploration_rate),
                save_path,
            )
            print(f"MarioNet saved to {save_path} at step {self.curr_step}")

    class Mario(Mario):
        def __init__(self, state_dim, action_dim, save_dir):
            super().__init__(state_dim, action_dim, save_dir)
            self.burnin = 4  # 1e4
            self.learn_every = 2  # 3
            self.sync_every = 6  # 1e4

        def learn(self):
            if self.curr_step % self.sync_every == 0:
                self.sync_Q_target()
            if self.curr_step % self.save_every == 0:
                self.save()
            if self.curr_step < self.burnin:
                return None, None
            if self.curr_step % self.learn_every != 0:
                return None, None
            state, next_state, action, reward, done = self.recall()
            td_est = self.td_estimate(state, action)
            td_tgt = self.td_target(reward, next_state, done)
            loss = self.update_Q_online(td_est, td_tgt)
            return (td_est.mean().item(), loss)

    env = MarioEnv(seed)
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    mario = Mario(state_dim=(4, 84, 84), action_dim=2, save_dir=save_dir)
    log = {"q": [], "loss": [], "rewards": [], "actions": []}
    for e in range(episodes):
        state = env.reset()
        ep_reward = 0.0
        while True:
            action = mario.act(state)
            next_state, reward, done, info = env.step(action)
            mario.cache(state, next_state, action, reward, done)
            q, loss = mario.learn()
            log["actions"].append(action)
            if loss:
                log["q"].append(q)
                log["loss"].append(loss)
            ep_reward += reward
            state = next_state
            if done or info["flag_get"]:
                break
        log["rewards"].append(ep_reward)
    log["printed"] = printed
    log["mario"] = mario
    return log


# ------------------------------------------------------------------------------------ Autoencoders

def autoencoders(torch, set_params, seed=0, host=True):
    """autoencoders_tutorial.py ("Autoencoder: A Deep Dive"): FashionMNIST becomes 32 random images (one
    batch of the page's hard-wired 32), CIFAR10 8 (one short batch), epochs 10/10/5/3 become 2/1/1/1,
    ``num_workers=2`` becomes 0 and the plots are left out."""
    nn = torch.nn
    F = torch.nn.functional
    out = {}

    def make_dataloader(data_, batch_size: int):
        batch_size = 32
        train_loader = torch.utils.data.DataLoader(
            data_, batch_size=batch_size, shuffle=True, num_workers=0  # 2
        )
        return train_loader

    def make_model(model_object, lr_rate=0.001, compress_=None):
        if not compress_:
            model_ = model_object()
        else:
            model_ = model_object(compress_)
        set_params(torch, model_, seed)
        optimizer_ = torch.optim.Adam(model_.parameters(), lr=lr_rate)
        loss_ = nn.MSELoss()
        return model_, optimizer_, loss_

    def test_model(loader_obj, model_, linear=True) -> None:
        batch_iter = iter(loader_obj)
        batch_images = next(batch_iter)
        tmp_image = batch_images[0][0, 0, :, :]
        if linear:
            model_input = tmp_image.reshape(28 * 28)
        else:
            model_input = tmp_image.reshape(1, 1, 28, 28)
        model_.eval()
        with torch.inference_mode():
            output = model_(model_input)
        out.setdefault("tested", []).append((tmp_image.numpy(), output.detach().numpy().reshape(28, 28)))
        return

    def train_model(model_obj, optimizer_obj, loss_obj, loader_obj, batch_s: int, epoch_num: int = 1,
                    model_linear=True):
        train_loss = []
        for epoch in range(epoch_num):
            for i, data_ in enumerate(loader_obj, 0):
                batches, targets = data_
                if model_linear:
                    batches = batches.reshape([batch_s, 28 * 28])
                optimizer_obj.zero_grad()
                logits = model_obj(batches)
                loss = loss_obj(logits, batches)
                loss.backward()
                optimizer_obj.step()
                train_loss.append(loss.item())
        out.setdefault("losses", []).append(train_loss)
        return model_obj

    def add_noise(img_, noise_int: float):
        noise = np.random.normal(loc=0, scale=1, size=img_.shape)
        noisy = np.clip((img_.numpy() + noise * noise_int), 0, 1)
        noisy_tensor = torch.tensor(noisy, dtype=torch.float).reshape(1, 1, 28, 28)
        return noisy_tensor

    def noisy_test(loader_obj, model_, linear: bool = True, noise_intensity: float = 0.2):
        batch_iter = iter(loader_obj)
        batch_images = next(batch_iter)
        tmp_image = batch_images[0][0, 0, :, :]
        noisy_img = add_noise(tmp_image, noise_intensity)
        if linear:
            model_input = noisy_img.reshape(28 * 28)
        else:
            model_input = noisy_img.reshape(1, 1, 28, 28)
        model_.eval()
        with torch.inference_mode():
            output = model_(model_input)
        out["noisy"] = (noisy_img.reshape(28, 28).numpy(), output.detach().numpy().reshape(28, 28))

    rng = np.random.default_rng(seed)
    fashion = torch.utils.data.TensorDataset(torch.tensor(rng.random((32, 1, 28, 28)), dtype=torch.float32),
                                             torch.tensor(rng.integers(0, 10, 32)))
    cifar = torch.utils.data.TensorDataset(torch.tensor(rng.random((8, 3, 32, 32)), dtype=torch.float32),
                                           torch.tensor(rng.integers(0, 10, 8)))
    batch_size = 32
    train_loader = make_dataloader(fashion, batch_size)
    out["shapes"] = [tuple(d[0].shape) for d in train_loader]

    class AutoencoderLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear_en_1 = nn.Linear(in_features=28*28, out_features=196)
            self.linear_en_2 = nn.Linear(in_features=196, out_features=98)
            self.linear_de_1 = nn.Linear(in_features=98, out_features=196)
            self.linear_de_2 = nn.Linear(in_features=196, out_features=28*28)

        def forward(self, x):
            encode_1 = F.leaky_relu(self.linear_en_1(x))
            encode_2 = F.leaky_relu(self.linear_en_2(encode_1))
            decode_1 = F.leaky_relu(self.linear_de_1(encode_2))
            decode_2 = F.sigmoid(self.linear_de_2(decode_1))
            return decode_2

    model_aal, optimizer, loss_fn = make_model(AutoencoderLinear)
    if host:
        test_model(train_loader, model_aal)
    model_aal = train_model(model_aal, optimizer, loss_fn, train_loader, batch_size, epoch_num=2)

    class AutoencoderLinearA(nn.Module):
        def __init__(self, compress_nodes):
            super().__init__()
            self.linear_en_1 = nn.Linear(in_features=28*28, out_features=196)
            self.linear_en_2 = nn.Linear(in_features=196, out_features=98)
            self.linear_de_1 = nn.Linear(in_features=98, out_features=196)
            self.linear_de_2 = nn.Linear(in_features=196, out_features=28*28)
            self.linear_en_c = nn.Linear(in_features=98, out_features=compress_nodes)
            self.linear_de_c = nn.Linear(in_features=compress_nodes, out_features=98)

        def forward(self, x):
            encode_1 = F.leaky_relu(self.linear_en_1(x))
            encode_2 = F.leaky_relu(self.linear_en_2(encode_1))
            encode_c = self.linear_en_c(encode_2)
            decode_c = self.linear_de_c(encode_c)
            decode_1 = F.leaky_relu(self.linear_de_1(decode_c))
            decode_2 = F.sigmoid(self.linear_de_2(decode_1))
            return decode_2

    model_aala, optimizer, loss_fn = make_model(AutoencoderLinearA, compress_=10)
    model_aala = train_model(model_aala, optimizer, loss_fn, train_loader, batch_size, epoch_num=1)

    class AutoencoderCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(
                nn.Conv2d(in_channels=1, out_channels=16, kernel_size=(5,5), stride=(1,1)),
                nn.LeakyReLU(),
                nn.Conv2d(in_channels=16, out_channels=64, kernel_size=(5,5), stride=(1,1)),
                nn.LeakyReLU(),
                nn.Conv2d(in_channels=64, out_channels=128, kernel_size=(2,2), stride=(2,2)),
                nn.LeakyReLU(),
                nn.Flatten(),
                nn.Linear(in_features=128*10*10, out_features=144)
            )
            self.decoder = nn.Sequential(
                nn.Linear(in_features=144, out_features=128*10*10),
                nn.Unflatten(1, (128, 10, 10)),
                nn.ConvTranspose2d(in_channels=128, out_channels=64, kernel_size=(2,2), stride=(2,2)),
                nn.LeakyReLU(),
                nn.ConvTranspose2d(in_channels=64, out_channels=16, kernel_size=(5,5), stride=(1,1)),
                nn.LeakyReLU(),
                nn.ConvTranspose2d(in_channels=16, out_channels=1, kernel_size=(5,5), stride=(1,1)),
                nn.Sigmoid()
            )

        def forward(self, x):
            encoded = self.encoder(x)
            decoded = self.decoder(encoded)
            return decoded

    model_cnn, optimizer, loss_fn = make_model(AutoencoderCNN)
    model_cnn = train_model(model_cnn, optimizer, loss_fn, train_loader, batch_size, epoch_num=1, model_linear=False)
    batch_iter = iter(train_loader)
    batch_images = next(batch_iter)
    tmp_image = batch_images[0][0, 0, :, :]
    enc_output = model_cnn.encoder(tmp_image.reshape(1, 1, 28, 28))
    out["code"] = enc_output.detach().reshape(12, 12)
    if host:
        noisy_test(train_loader, model_cnn, linear=False, noise_intensity=0.3)

    cifar_loader = make_dataloader(cifar, 32)

    class AutoencoderCNNCIF(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(
                nn.Conv2d(in_channels=3, out_channels=32, kernel_size=(4,4), stride=(1,1), padding=2),
                nn.LeakyReLU(),
                nn.Conv2d(in_channels=32, out_channels=64, kernel_size=(5,5), stride=(2,2), padding=2),
                nn.LeakyReLU(),
                nn.Conv2d(in_channels=64, out_channels=128, kernel_size=(5,5), stride=(1,1)),
                nn.LeakyReLU(),
                nn.Conv2d(in_channels=128, out_channels=512, kernel_size=(3,3), stride=(2,2)),
                nn.LeakyReLU(),
                nn.Flatten(),
                nn.Linear(in_features=512*6*6, out_features=100)
            )
            self.decoder = nn.Sequential(
                nn.Linear(in_features=100, out_features=512*6*6),
                nn.Unflatten(1, (512, 6, 6)),
                nn.ConvTranspose2d(in_channels=512, out_channels=128, kernel_size=(3,3), stride=(2,2)),
                nn.LeakyReLU(),
                nn.ConvTranspose2d(in_channels=128, out_channels=64, kernel_size=(5,5), stride=(1,1)),
                nn.LeakyReLU(),
                nn.ConvTranspose2d(in_channels=64, out_channels=32, kernel_size=(5,5), stride=(2,2), padding=2),
                nn.LeakyReLU(),
                nn.ConvTranspose2d(in_channels=32, out_channels=3, kernel_size=(4,4), stride=(1,1), padding=2),
                nn.Sigmoid()
            )

        def forward(self, x):
            encoded = self.encoder(x)
            decoded = self.decoder(encoded)
            return decoded

    model_cifar, optimizer_cifar, loss_cifar = make_model(AutoencoderCNNCIF, .001)
    model_cifar = train_model(model_cifar, optimizer_cifar, loss_cifar, cifar_loader, 32, 1, False)
    images, labels = next(iter(cifar_loader))
    model_cifar.eval()
    with torch.inference_mode():
        out_batch = model_cifar(images)
    out["cifar"] = (images, out_batch)
    return out


# ------------------------------------------------------------------------------------ Transformer building blocks

def transformer_building_blocks(torch, N=4, E=16, nheads=2, seed=6, nested=True):
    """transformer_building_blocks.py: the MultiHeadAttention over jagged nested tensors against
    nn.MultiheadAttention on padded ones (self and cross attention, forward and backward), the
    packed input projection and the (packed) SwiGLU FFN (its flex section: flex_attention_on_nested).
    CUDA/bfloat16 become the default device in float32;
    the benchmark helper only runs the function."""
    nn = torch.nn
    F = torch.nn.functional
    out = {}

    class MultiHeadAttention(nn.Module):
        def __init__(self, E_q: int, E_k: int, E_v: int, E_total: int, nheads: int, dropout: float = 0.0,
                     bias=True, device=None, dtype=None):
            factory_kwargs = {"device": device, "dtype": dtype}
            super().__init__()
            self.nheads = nheads
            self.dropout = dropout
            self._qkv_same_embed_dim = E_q == E_k and E_q == E_v
            if self._qkv_same_embed_dim:
                self.packed_proj = nn.Linear(E_q, E_total * 3, bias=bias, **factory_kwargs)
            else:
                self.q_proj = nn.Linear(E_q, E_total, bias=bias, **factory_kwargs)
                self.k_proj = nn.Linear(E_k, E_total, bias=bias, **factory_kwargs)
                self.v_proj = nn.Linear(E_v, E_total, bias=bias, **factory_kwargs)
            E_out = E_q
            self.out_proj = nn.Linear(E_total, E_out, bias=bias, **factory_kwargs)
            assert E_total % nheads == 0, "Embedding dim is not divisible by nheads"
            self.E_head = E_total // nheads
            self.bias = bias

        def forward(self, query, key, value, attn_mask=None, is_causal=False):
            if self._qkv_same_embed_dim:
                if query is key and key is value:
                    result = self.packed_proj(query)
                    query, key, value = torch.chunk(result, 3, dim=-1)
                else:
                    q_weight, k_weight, v_weight = torch.chunk(self.packed_proj.weight, 3, dim=0)
                    if self.bias:
                        q_bias, k_bias, v_bias = torch.chunk(self.packed_proj.bias, 3, dim=0)
                    else:
                        q_bias, k_bias, v_bias = None, None, None
                    query, key, value = (
                        F.linear(query, q_weight, q_bias),
                        F.linear(key, k_weight, k_bias),
                        F.linear(value, v_weight, v_bias),
                    )
            else:
                query = self.q_proj(query)
                key = self.k_proj(key)
                value = self.v_proj(value)
            query = query.unflatten(-1, [self.nheads, self.E_head]).transpose(1, 2)
            key = key.unflatten(-1, [self.nheads, self.E_head]).transpose(1, 2)
            value = value.unflatten(-1, [self.nheads, self.E_head]).transpose(1, 2)
            attn_output = F.scaled_dot_product_attention(
                query, key, value, dropout_p=self.dropout, is_causal=is_causal)
            attn_output = attn_output.transpose(1, 2).flatten(-2)
            attn_output = self.out_proj(attn_output)
            return attn_output

    rs = np.random.RandomState(seed)

    def zipf_sentence_lengths(alpha: float, batch_size: int):
        # the page's Zipf walk until '.', '!' or '?'; its expected length (~hundreds) is cut by a
        # bounded draw of the same kind so the tiny run stays tiny
        sentence_lengths = np.empty(batch_size, dtype=int)
        for ibatch in range(batch_size):
            sentence_lengths[ibatch] = 1
            word = rs.zipf(alpha)
            while word > 3 and sentence_lengths[ibatch] < 7:
                sentence_lengths[ibatch] += 1
                word = rs.zipf(alpha)
        return torch.tensor(sentence_lengths)

    def randn(*shape, dtype=None, device=None):  # torch.randn, drawn by NumPy (same data in both libraries)
        return torch.tensor(rs.standard_normal(shape), dtype=dtype, device=device)

    def gen_batch(N, E_q, E_k, E_v, device, dtype=torch.float32, query_seq_len_1=False):
        sentence_lengths = zipf_sentence_lengths(alpha=1.2, batch_size=N)
        if query_seq_len_1:
            query = torch.nested.nested_tensor(
                [randn(1, E_q, dtype=dtype, device=device) for l in sentence_lengths], layout=torch.jagged)
        else:
            query = torch.nested.nested_tensor(
                [randn(l.item(), E_q, dtype=dtype, device=device) for l in sentence_lengths], layout=torch.jagged)
        key = torch.nested.nested_tensor(
            [randn(s.item(), E_k, dtype=dtype, device=device) for s in sentence_lengths], layout=torch.jagged)
        value = torch.nested.nested_tensor(
            [randn(s.item(), E_v, dtype=dtype, device=device) for s in sentence_lengths], layout=torch.jagged)
        return query, key, value, sentence_lengths

    def benchmark(func, *args, **kwargs):
        return func(*args, **kwargs), 0.0, 0

    E_q, E_k, E_v, E_total = E, E, E, E
    dropout, bias = 0.0, True
    device = torch.get_default_device()
    query, key, value, sentence_lengths = gen_batch(N, E_q, E_k, E_v, device)
    S = sentence_lengths.max().item()
    out["lengths"] = sentence_lengths.tolist()
    padded_query, padded_key, padded_value = (t.to_padded_tensor(0.0) for t in (query, key, value))

    torch.manual_seed(6)
    mha_layer = MultiHeadAttention(E_q, E_k, E_v, E_total, nheads, dropout=dropout, bias=bias, device=device)
    torch.manual_seed(6)
    vanilla_mha_layer = nn.MultiheadAttention(E_q, nheads, dropout=dropout, batch_first=True, bias=bias,
                                              device=device)
    with torch.no_grad():  # the same start in both libraries
        for p in vanilla_mha_layer.parameters():
            p.copy_(randn(*p.shape) * 0.3)
    mha_layer.out_proj.weight = nn.Parameter(vanilla_mha_layer.out_proj.weight.clone().detach())
    mha_layer.packed_proj.weight = nn.Parameter(vanilla_mha_layer.in_proj_weight.clone().detach())
    mha_layer.out_proj.bias = nn.Parameter(vanilla_mha_layer.out_proj.bias.clone().detach())
    mha_layer.packed_proj.bias = nn.Parameter(vanilla_mha_layer.in_proj_bias.clone().detach())

    new_mha_layer = torch.compile(mha_layer)
    if nested:  # PyTorch's CPU build has no SDPA kernel for these NJTs ("No viable backend"): CUDA only
        nested_result_warmup = new_mha_layer(query, query, query, is_causal=True)
        nested_result, nested_time, nested_peak_memory = benchmark(new_mha_layer, query, query, query,
                                                                   is_causal=True)
        padded_nested_result = nested_result.to_padded_tensor(0.0)

    src_key_padding_mask = torch.where(padded_query == 0.0, -math.inf, 0)[:, :, 0]
    attn_mask = torch.empty((N, S, S), device=device).fill_(float("-inf"))
    for i, s in enumerate(sentence_lengths):
        attn_mask[i, :s, :s] = nn.Transformer.generate_square_subsequent_mask(s)
    attn_mask = attn_mask.unsqueeze(1).expand(N, nheads, S, S).reshape(N * nheads, S, S)

    vanilla_mha_layer = torch.compile(vanilla_mha_layer)
    (padded_result, _), padded_time, padded_peak_memory = benchmark(
        vanilla_mha_layer, padded_query, padded_query, padded_query, key_padding_mask=src_key_padding_mask,
        need_weights=False, attn_mask=attn_mask, is_causal=True)
    out["vanilla_self"] = padded_result.detach().clone()
    out["out_bias"] = vanilla_mha_layer.out_proj.bias.detach().clone()
    if nested:
        out["self_diff"] = (padded_result - padded_nested_result).abs().max().item()

    for i, entry_length in enumerate(sentence_lengths):
        padded_result[i, entry_length:, :] = 0.0
    out["padded_result"] = padded_result.detach()
    benchmark(lambda: padded_result.sum().backward())
    out["vanilla_grads"] = [vanilla_mha_layer.in_proj_weight.grad.detach(),
                            vanilla_mha_layer.out_proj.weight.grad.detach()]
    if not nested:
        return out
    benchmark(lambda: padded_nested_result.sum().backward())
    out["grad_diffs"] = [
        (mha_layer.out_proj.weight.grad - vanilla_mha_layer.out_proj.weight.grad).abs().max().item(),
        (mha_layer.packed_proj.weight.grad - vanilla_mha_layer.in_proj_weight.grad).abs().max().item(),
        (mha_layer.out_proj.bias.grad - vanilla_mha_layer.out_proj.bias.grad).abs().max().item(),
        (mha_layer.packed_proj.bias.grad - vanilla_mha_layer.in_proj_bias.grad).abs().max().item(),
    ]
    out["grads"] = [mha_layer.packed_proj.weight.grad.detach(), mha_layer.out_proj.weight.grad.detach()]

    # cross attention
    query, _, _, q_len = gen_batch(N, E_q, E_k, E_v, device)
    _, key, value, kv_len = gen_batch(N, E_q, E_k, E_v, device)
    padded_query, padded_key, padded_value = (t.to_padded_tensor(0.0) for t in (query, key, value))
    key_padding_mask = torch.where(padded_key == 0.0, -math.inf, 0)[:, :, 0]
    nested_result, _, _ = benchmark(new_mha_layer, query, key, value, is_causal=False)
    (padded_result, _), _, _ = benchmark(vanilla_mha_layer, padded_query, padded_key, padded_value,
                                         key_padding_mask=key_padding_mask, need_weights=False, is_causal=False)
    padded_nested_result = nested_result.to_padded_tensor(0.0)
    for i, entry_length in enumerate(q_len):
        padded_result[i, entry_length:, :] = 0.0
    out["cross_diff"] = (padded_result - padded_nested_result).abs().max().item()
    out["cross"] = padded_nested_result.detach()

    # packed projections
    class InputProjection(nn.Module):
        def __init__(self, E_q, E_total, bias=False, device=None, dtype=None):
            factory_kwargs = {"device": device, "dtype": dtype}
            super().__init__()
            self.q_proj = nn.Linear(E_q, E_total, bias=bias, **factory_kwargs)
            self.k_proj = nn.Linear(E_q, E_total, bias=bias, **factory_kwargs)
            self.v_proj = nn.Linear(E_q, E_total, bias=bias, **factory_kwargs)

        def forward(self, x):
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    class PackedInputProjection(nn.Module):
        def __init__(self, E_q, E_total, bias=False, device=None, dtype=None):
            factory_kwargs = {"device": device, "dtype": dtype}
            super().__init__()
            self.packed_proj = nn.Linear(E_q, E_total * 3, bias=bias, **factory_kwargs)

        def forward(self, query):
            return torch.chunk(self.packed_proj(query), 3, dim=-1)

    B, D, dtype = 3, 8, torch.float32
    torch.set_float32_matmul_precision("high")
    in_proj = torch.compile(InputProjection(D, D, device=device, dtype=dtype))
    packed_in_proj = torch.compile(PackedInputProjection(D, D, device=device, dtype=dtype))
    with torch.no_grad():
        packed_in_proj.packed_proj.weight.copy_(torch.cat([in_proj.q_proj.weight, in_proj.k_proj.weight,
                                                           in_proj.v_proj.weight]))
    q, _, _, sequence_lengths = gen_batch(B, D, D, D, device=device, dtype=dtype)
    (q_out, k_out, v_out), time, _ = benchmark(in_proj, q)
    (q_out2, k_out2, v_out2), time_packed, _ = benchmark(packed_in_proj, q)
    out["packed_diff"] = max((a - b).abs().max().item() for a, b in
                             zip((q_out, k_out, v_out), (q_out2, k_out2, v_out2)))

    class SwiGLUFFN(nn.Module):
        def __init__(self, dim, hidden_dim, multiple_of, ffn_dim_multiplier=None, device=None, dtype=None):
            factory_kwargs = {"device": device, "dtype": dtype}
            super().__init__()
            hidden_dim = int(2 * hidden_dim / 3)
            if ffn_dim_multiplier is not None:
                hidden_dim = int(ffn_dim_multiplier * hidden_dim)
            hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
            self.w1 = nn.Linear(dim, hidden_dim, bias=False, **factory_kwargs)
            self.w2 = nn.Linear(hidden_dim, dim, bias=False, **factory_kwargs)
            self.w3 = nn.Linear(dim, hidden_dim, bias=False, **factory_kwargs)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class PackedSwiGLUFFN(nn.Module):
        def __init__(self, dim, hidden_dim, multiple_of, ffn_dim_multiplier=None, device=None, dtype=None):
            factory_kwargs = {"device": device, "dtype": dtype}
            super().__init__()
            hidden_dim = int(2 * hidden_dim / 3)
            if ffn_dim_multiplier is not None:
                hidden_dim = int(ffn_dim_multiplier * hidden_dim)
            hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
            self.w13 = nn.Linear(dim, 2 * hidden_dim, bias=False, **factory_kwargs)
            self.w2 = nn.Linear(hidden_dim, dim, bias=False, **factory_kwargs)

        def forward(self, x):
            x1, x3 = torch.chunk(self.w13(x), 2, dim=-1)
            return self.w2(F.silu(x1) * x3)

    D = 8
    swigluffn = torch.compile(SwiGLUFFN(D, D * 4, 16, device=device, dtype=dtype))
    packed_swigluffn = torch.compile(PackedSwiGLUFFN(D, D * 4, 16, device=device, dtype=dtype))
    with torch.no_grad():
        packed_swigluffn.w13.weight.copy_(torch.cat([swigluffn.w1.weight, swigluffn.w3.weight]))
        packed_swigluffn.w2.weight.copy_(swigluffn.w2.weight)
    q, _, _, sentence_lengths = gen_batch(D, D, D, D, device=device, dtype=dtype)
    a, _, _ = benchmark(swigluffn, q)
    b, _, _ = benchmark(packed_swigluffn, q)
    out["swiglu_hidden"] = swigluffn.w1.weight.shape[0]
    out["swiglu_diff"] = (a - b).abs().max().item()
    out["swiglu"] = a.to_padded_tensor(0.0).detach()
    return out


def flex_attention_on_nested(torch, seed=6):
    """The page's "FlexAttention + NJT" section as written. PyTorch 2.13 refuses nested inputs to
    ``flex_attention`` (NotImplementedError) and no longer has ``create_nested_block_mask``; the
    page predates that, so both libraries stop at its first call. Returns the error message."""
    import importlib
    fa = importlib.import_module(torch.__name__ + ".nn.attention.flex_attention")
    flex_attention = fa.flex_attention
    rng = np.random.default_rng(seed)
    N, E_q, n_heads = 3, 8, 2
    D = E_q // n_heads

    def generate_alibi_bias(H: int):
        def alibi_mod(score, b, h, q_idx, kv_idx):
            scale = torch.exp2(-((h + 1) * 8.0 / H))
            bias = (q_idx - kv_idx) * scale
            return score + bias
        return alibi_mod

    def njt():  # gen_batch's jagged tensors, lengths 2..4, drawn by NumPy
        return torch.nested.nested_tensor([torch.tensor(rng.standard_normal((n, E_q)), dtype=torch.float32)
                                           for n in (2, 4, 3)], layout=torch.jagged)

    query, key, value = njt(), njt(), njt()
    alibi_score_mod = generate_alibi_bias(n_heads)
    query = query.unflatten(-1, [n_heads, D]).transpose(1, 2).detach().requires_grad_()
    key = key.unflatten(-1, [n_heads, D]).transpose(1, 2).detach().requires_grad_()
    value = value.unflatten(-1, [n_heads, D]).transpose(1, 2).detach().requires_grad_()
    try:
        flex_attention(query, key, value, score_mod=alibi_score_mod)
    except NotImplementedError as exc:
        return str(exc), hasattr(fa, "create_nested_block_mask")
    raise AssertionError("flex_attention accepted nested inputs")


# ------------------------------------------------------------------------------------ The maths behind training

def math_behind_training(torch):
    """math_behind_training_tutorial.py, every part; returns what it prints."""
    nn = torch.nn
    lines = []
    print = lambda *a: lines.append(" ".join(str(x) for x in a))  # noqa: E731,A001

    torch.manual_seed(42)
    layer = nn.Linear(in_features=3, out_features=2)
    x = torch.tensor([[1.0, 2.0, 3.0]])
    y_layer = layer(x)
    y_manual = x @ layer.weight.T + layer.bias
    print(f"Match: {torch.allclose(y_layer, y_manual)}")
    print(f"Weight matrix W shape: {list(layer.weight.shape)}")
    print(f"\nBias vector b shape:   {list(layer.bias.shape)}")
    print(f"\nTotal parameters:      {sum(p.numel() for p in layer.parameters())}")
    layer1 = nn.Linear(3, 4, bias=False)
    layer2 = nn.Linear(4, 2, bias=False)
    y_stacked = layer2(layer1(x))
    y_collapsed = x @ (layer2.weight @ layer1.weight).T
    print(f"Match: {torch.allclose(y_stacked, y_collapsed)}")

    x_range = torch.linspace(-3, 3, steps=7)
    relu_output = torch.relu(x_range)
    print("Input:       ", x_range.tolist())
    print("ReLU output: ", relu_output.tolist())
    torch.manual_seed(0)
    layer_output = torch.randn(100, 8) - 1.0
    after_relu = torch.relu(layer_output)
    dead = (after_relu == 0).all(dim=0)
    print(f"\nDead neurons: {dead.sum().item() >= 0} out of {after_relu.shape[1]}")

    x = torch.tensor([2.0], requires_grad=True)
    y = x ** 2
    z = 3 * y + 1
    z.backward()
    print(f"x = {x.item()}")
    print(f"z = 3x² + 1 = {z.item()}")
    print(f"Autograd:  dz/dx = {x.grad.item()}")
    print(f"Manual:    dz/dx = 6x = {6 * x.item()}")

    x = torch.tensor([[2.0, 1.0]])
    W = torch.tensor([[0.5, -0.3], [0.8, 0.2]], requires_grad=True)
    b = torch.tensor([0.1, -0.1], requires_grad=True)
    y = x @ W.T + b
    loss = y.sum()
    loss.backward()
    print(f"  loss = {loss.item()}")
    print(f"  dL/dW = {W.grad.tolist()}")
    print(f"  dL/db = {b.grad.tolist()}")
    manual_grad_W = torch.ones(2, 1) @ x
    manual_grad_b = torch.ones(2)
    print(f"  W match: {torch.allclose(W.grad, manual_grad_W)}")
    print(f"  b match: {torch.allclose(b.grad, manual_grad_b)}")

    x = torch.tensor([2.0], requires_grad=True)
    y = x ** 2
    z = 3 * y + 1
    print(f"x.grad_fn = {x.grad_fn}")
    print(f"y.grad_fn = {y.grad_fn}")       # PowBackward0
    print(f"z.grad_fn = {z.grad_fn}")       # AddBackward0

    def trace_graph(tensor, indent=0):
        if tensor.grad_fn is not None:
            print(" " * indent + str(tensor.grad_fn))
            for child, _ in tensor.grad_fn.next_functions:
                if child is not None:
                    trace_graph_node(child, indent + 2)

    def trace_graph_node(node, indent=0):
        print(" " * indent + str(node))
        for child, _ in node.next_functions:
            if child is not None:
                trace_graph_node(child, indent + 2)

    trace_graph(z)
    with torch.no_grad():
        y_no_graph = x ** 2
    print(f"\nWith torch.no_grad():  grad_fn = {y_no_graph.grad_fn}")
    y_detached = (x ** 2).detach()
    print(f"With .detach():        grad_fn = {y_detached.grad_fn}")

    torch.manual_seed(0)
    model = nn.Linear(1, 1)
    with torch.no_grad():  # the same start in both libraries (their random streams differ)
        model.weight.fill_(-0.0075)
        model.bias.fill_(0.5364)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    old_weight = model.weight.data.clone()
    old_bias = model.bias.data.clone()
    x = torch.tensor([[1.0]])
    target = torch.tensor([[3.0]])
    prediction = model(x)
    loss = nn.functional.mse_loss(prediction, target)
    optimizer.zero_grad()
    loss.backward()
    print(f"Weight gradient: {model.weight.grad.item():.4f}")
    print(f"Bias gradient:   {model.bias.grad.item():.4f}")
    optimizer.step()
    manual_weight = old_weight - 0.1 * model.weight.grad
    manual_bias = old_bias - 0.1 * model.bias.grad
    print(f"\nWeight after step:  {model.weight.data.item():.4f}")
    print(f"Manual computation: {manual_weight.item():.4f}")
    print(f"Match: {torch.allclose(model.weight.data, manual_weight)}")

    torch.manual_seed(0)
    X = torch.linspace(0, 1, 50).unsqueeze(1)
    y_true = 3 * X + 1
    model = nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(-0.0075)
        model.bias.fill_(0.5364)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    print(f"Before training:  W = {model.weight.item():.4f}, b = {model.bias.item():.4f}")
    for epoch in range(200):
        prediction = model(X)
        loss = nn.functional.mse_loss(prediction, y_true)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (epoch + 1) % 50 == 0:
            print(f"Epoch {epoch+1:3d}  |  Loss: {loss.item():.6f}  |  "
                  f"W: {model.weight.item():.4f}  |  b: {model.bias.item():.4f}")
    fit1 = (model.weight.item(), model.bias.item())

    torch.manual_seed(42)
    X = torch.tensor(np.random.default_rng(42).standard_normal((100, 3)), dtype=torch.float32)  # torch.randn
    y = X @ torch.tensor([2.0, -1.0, 0.5]) + 0.3
    model = nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.1, 0.2, -0.3]]))
        model.bias.fill_(0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(300):
        prediction = model(X).squeeze()
        loss = nn.functional.mse_loss(prediction, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"Learned weights: {[round(w, 3) for w in model.weight.data.squeeze().tolist()]}")
    print(f"Learned bias:    {model.bias.item():.4f}")
    return lines, fit1, model.weight.detach().reshape(-1).tolist(), model.bias.item()


# ------------------------------------------------------------------------------------ nn package (former torchies)

def nn_package(torch, set_params):
    """former_torchies/nnft_tutorial.py ("nn package"), as written; returns what it prints."""
    nn = torch.nn
    F = torch.nn.functional
    lines = []
    print = lambda *a: lines.append(" ".join(str(x) for x in a))  # noqa: E731,A001

    class MNISTConvNet(nn.Module):
        def __init__(self):
            super(MNISTConvNet, self).__init__()
            self.conv1 = nn.Conv2d(1, 10, 5)
            self.pool1 = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(10, 20, 5)
            self.pool2 = nn.MaxPool2d(2, 2)
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)

        def forward(self, input):
            x = self.pool1(F.relu(self.conv1(input)))
            x = self.pool2(F.relu(self.conv2(x)))
            x = x.flatten(start_dim=1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            return x

    net = MNISTConvNet()
    set_params(torch, net, 0, scale=0.2)
    print(net)
    rng = np.random.default_rng(1)
    input = torch.tensor(rng.standard_normal((1, 1, 28, 28)), dtype=torch.float32)  # torch.randn(1, 1, 28, 28)
    out = net(input)
    print(out.size())
    target = torch.tensor([3], dtype=torch.long)
    loss_fn = nn.CrossEntropyLoss()
    err = loss_fn(out, target)
    err.backward()
    print(f"{err.item():.5f}")
    print(net.conv1.weight.grad.size())
    print(f"{net.conv1.weight.data.norm().item():.5f}")
    print(f"{net.conv1.weight.grad.data.norm().item():.5f}")

    def printnorm(self, input, output):
        print('Inside ' + self.__class__.__name__ + ' forward')
        print('')
        print('input: ', type(input).__name__)
        print('input[0]: ', type(input[0]).__name__)
        print('output: ', type(output).__name__)
        print('')
        print('input size:', input[0].size())
        print('output size:', output.data.size())
        print('output norm:', f"{output.data.norm().item():.5f}")

    net.conv2.register_forward_hook(printnorm)
    out = net(input)

    def printgradnorm(self, grad_input, grad_output):
        print('Inside ' + self.__class__.__name__ + ' backward')
        print('Inside class:' + self.__class__.__name__)
        print('')
        print('grad_input: ', type(grad_input).__name__)
        print('grad_input[0]: ', type(grad_input[0]).__name__)
        print('grad_output: ', type(grad_output).__name__)
        print('grad_output[0]: ', type(grad_output[0]).__name__)
        print('')
        print('grad_input size:', grad_input[0].size())
        print('grad_output size:', grad_output[0].size())
        print('grad_input norm:', f"{grad_input[0].norm().item():.5f}")
        print('grad_input sizes:', [None if g is None else tuple(g.size()) for g in grad_input])

    net.conv2.register_backward_hook(printgradnorm)
    out = net(input)
    err = loss_fn(out, target)
    err.backward()

    class RNN(nn.Module):
        def __init__(self, data_size, hidden_size, output_size):
            super(RNN, self).__init__()
            self.hidden_size = hidden_size
            input_size = data_size + hidden_size
            self.i2h = nn.Linear(input_size, hidden_size)
            self.h2o = nn.Linear(hidden_size, output_size)

        def forward(self, data, last_hidden):
            input = torch.cat((data, last_hidden), 1)
            hidden = self.i2h(input)
            output = self.h2o(hidden)
            return hidden, output

    rnn = RNN(50, 20, 10)
    set_params(torch, rnn, 2, scale=0.1)
    loss_fn = nn.MSELoss()
    batch_size = 10
    TIMESTEPS = 5
    batch = torch.tensor(rng.standard_normal((batch_size, 50)), dtype=torch.float32)  # torch.randn
    hidden = torch.zeros(batch_size, 20)
    target = torch.zeros(batch_size, 10)
    loss = 0
    for t in range(TIMESTEPS):
        hidden, output = rnn(batch, hidden)
        loss += loss_fn(output, target)
    loss.backward()
    print(f"{loss.item():.5f}", f"{rnn.i2h.weight.grad.norm().item():.5f}")
    return lines


# ------------------------------------------------------------------------------------ DDIM

class _NumpyDraws:
    """The ``torch`` the page sees: the real module, but ``randn``/``randn_like``/``randint`` draw from
    NumPy (the two libraries' random streams differ; the same draws make the parity run exact)."""
    def __init__(self, torch, seed):
        self._torch, self._rng = torch, np.random.default_rng(seed)

    def __getattr__(self, name):
        return getattr(self._torch, name)

    def randn(self, *size, **kw):
        size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return self._torch.tensor(self._rng.standard_normal(size), dtype=self._torch.float32)

    def randn_like(self, x):
        return self.randn(*x.shape).to(x.device)

    def randint(self, low, high, size):
        return self._torch.tensor(self._rng.integers(low, high, size))


def ddim(torch, set_params, workdir, seed=0):
    """advanced_source/DDIM_tutorial.py: the DiffUnet (ResidualBlock with GroupNorm/SiLU and a time
    projection, AttnBlock through bmm, DownBlock with F.pad, UpBlock with nearest interpolate), the
    cosv2 beta schedule, DDIMSampler (q_sample, p_sample, treshold_sample's quantile), DiffusionModel
    (l1 train_loss, EMA update through .data, save/load) and train_epoch with clip_grad_norm_, then
    DDIM generation. Tiny: 8x8 images, chs 32, one level, 2 train steps, 3 inference steps, dropout 0
    (for the parity run); Flowers102 becomes random images in [-1, 1]; torchmetrics' KID is left out."""
    import os
    torch = _NumpyDraws(torch, seed)
    nn = torch.nn
    printed = []
    print = printed.append  # noqa: A001
    MAX_FREQ = 1000

    def get_timestep_embedding(timesteps, embedding_dim):
        assert len(timesteps.shape) == 1
        half_dim = embedding_dim // 2
        emb = math.log(MAX_FREQ) / (half_dim - 1)
        emb = torch.exp(torch.arange(half_dim, dtype=torch.float32) * -emb)
        emb = emb.to(device=timesteps.device)
        emb = timesteps.float()[:, None] * emb[None, :]
        emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)
        if embedding_dim % 2 == 1:
            emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
        return emb

    def Normalize(in_channels):
        return torch.nn.GroupNorm(num_groups=32, num_channels=in_channels, eps=1e-6, affine=True)

    def nonlinearity(name):
        return getattr(nn, name)()

    class ResidualBlock(nn.Module):
        def __init__(self, in_chs, out_chs, temb_dim, act='SiLU', dropout=0.2):
            super().__init__()
            self.time_proj = nn.Sequential(nonlinearity(act), nn.Linear(temb_dim, out_chs))
            dims = [in_chs] + 2 * [out_chs]
            blocks = []
            for i in range(1, 3):
                blc = nn.Sequential(Normalize(dims[i - 1]), nonlinearity(act),
                                    nn.Conv2d(dims[i - 1], dims[i], 3, padding=1),)
                if i > 1:
                    blc.insert(2, nn.Dropout(dropout))
                blocks.append(blc)
            self.blocks = nn.ModuleList(blocks)
            self.short_cut = False
            if in_chs != out_chs:
                self.short_cut = True
                self.conv_short = nn.Conv2d(in_chs, out_chs, 1)

        def forward(self, x, temb):
            h = x
            for i, blc in enumerate(self.blocks):
                h = blc(h)
                if i == 0:
                    h = h + self.time_proj(temb)[:, :, None, None]
            if self.short_cut:
                x = self.conv_short(x)
            return x + h

    class AttnBlock(nn.Module):
        def __init__(self, in_channels):
            super().__init__()
            self.in_channels = in_channels
            self.norm = Normalize(in_channels)
            self.q = torch.nn.Conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
            self.k = torch.nn.Conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
            self.v = torch.nn.Conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)
            self.proj_out = torch.nn.Conv2d(in_channels, in_channels, kernel_size=1, stride=1, padding=0)

        def forward(self, x):
            h_ = x
            h_ = self.norm(h_)
            q = self.q(h_)
            k = self.k(h_)
            v = self.v(h_)
            b, c, h, w = q.shape
            q = q.reshape(b, c, h * w)
            q = q.permute(0, 2, 1)
            k = k.reshape(b, c, h * w)
            w_ = torch.bmm(q, k)
            w_ = w_ * (c ** (-0.5))
            w_ = torch.nn.functional.softmax(w_, dim=2)
            v = v.reshape(b, c, h * w)
            w_ = w_.permute(0, 2, 1)
            h_ = torch.bmm(v, w_)
            h_ = h_.reshape(b, c, h, w)
            h_ = self.proj_out(h_)
            return x + h_

    class DownBlock(nn.Module):
        def __init__(self, out_chs, with_conv=True):
            super().__init__()
            self.with_conv = with_conv
            if with_conv:
                self.down_conv = nn.Conv2d(out_chs, out_chs, 3, stride=2)
            else:
                self.down_conv = nn.AvgPool2d(2, 2)

        def _down(self, x):
            if self.with_conv:
                pad = (0, 1, 0, 1)
                x = torch.nn.functional.pad(x, pad, mode="constant", value=0)
                x = self.down_conv(x)
            else:
                x = self.down_conv(x)
            return x

        def forward(self, x):
            return self._down(x)

    class UpBlock(nn.Module):
        def __init__(self, out_chs, with_conv=True, mode='nearest',):
            super().__init__()
            self.with_conv = with_conv
            self.mode = mode
            if with_conv:
                self.up_conv = nn.Conv2d(out_chs, out_chs, 3, padding=1)

        def _up(self, x):
            x = torch.nn.functional.interpolate(x, scale_factor=2.0, mode=self.mode)
            if self.with_conv:
                x = self.up_conv(x)
            return x

        def forward(self, x):
            return self._up(x)

    class DiffUnet(nn.Module):
        def __init__(self, chs=32, chs_mult=[2, 2, 4, 4, 8], attn_res=[16, 8, 4], block_depth=2, act='SiLU',
                     temb_dim=256, with_conv=True, res=64, dropout=0.3):
            super().__init__()
            self.chs = chs
            self.conv_in = nn.Conv2d(3, chs, 3, padding=1)
            self.time_proj = nn.Sequential(nn.Linear(chs, temb_dim), nonlinearity(act), nn.Linear(temb_dim, temb_dim))
            chs_mult = [1] + chs_mult
            down_dims = []
            downs = []
            for i in range(1, len(chs_mult) - 1):
                in_ch = chs * chs_mult[i - 1]
                out_ch = chs * chs_mult[i]
                down = nn.Module()
                down.res = nn.ModuleList([ResidualBlock(in_ch, out_ch, temb_dim, act, dropout)] +
                                         [ResidualBlock(out_ch, out_ch, temb_dim, act, dropout)
                                          for _ in range(1, block_depth)])
                attn = AttnBlock(out_ch) if res in attn_res else nn.Identity()
                down.attn = attn
                down.down_blc = DownBlock(out_ch, with_conv)
                downs.append(down)
                down_dims.append(out_ch)
                res = res // 2
            self.downs = nn.ModuleList(downs)
            last_ch_dim = chs * chs_mult[-1]
            self.mid_res1 = ResidualBlock(out_ch, last_ch_dim, temb_dim, act, dropout)
            self.mid_attn = AttnBlock(last_ch_dim)
            self.mid_res2 = ResidualBlock(last_ch_dim, last_ch_dim, temb_dim, act, dropout)
            down_dims = down_dims[1:] + [last_ch_dim]
            ups = []
            for i, skip_ch in zip(reversed(range(1, len(chs_mult) - 1)), reversed(down_dims)):
                out_ch = chs * chs_mult[i]
                in_ch = out_ch + skip_ch
                up = nn.Module()
                up.res = nn.ModuleList([ResidualBlock(in_ch, out_ch, temb_dim, act, dropout)] +
                                       [ResidualBlock(out_ch * 2, out_ch, temb_dim, act, dropout)
                                        for _ in range(1, block_depth)])
                attn = AttnBlock(out_ch) if res in attn_res else nn.Identity()
                up.attn = attn
                up.up_blc = UpBlock(skip_ch, with_conv) if i != 0 else nn.Identity()
                ups.append(up)
                res = int(res * 2)
            self.ups = nn.ModuleList(ups)
            self.out = nn.Sequential(Normalize(out_ch), nonlinearity(act), nn.Conv2d(out_ch, 3, 3, padding=1))
            self.res = res

        def forward(self, x, timestep):
            t = get_timestep_embedding(timestep, self.chs)
            t = self.time_proj(t)
            h = self.conv_in(x)
            hs = []
            for blc in self.downs:
                for res_block in blc.res:
                    h = res_block(h, t)
                    h = blc.attn(h)
                    hs.append(h)
                h = blc.down_blc(h)
            h = self.mid_res1(h, t)
            h = self.mid_attn(h)
            h = self.mid_res2(h, t)
            for blc in self.ups:
                h = blc.up_blc(h)
                for res_block in blc.res:
                    h = torch.cat([h, hs.pop()], axis=1)
                    h = res_block(h, t)
                    h = blc.attn(h)
            return self.out(h)

    def get_beta_schedule(beta_schedule, *, beta_start, beta_end, num_diffusion_timesteps):
        def alpha_bar(time_step):
            return math.cos((time_step + 0.008) / 1.008 * math.pi / 2) ** 2
        if beta_schedule == "cosv2":
            betas = []
            for i in range(num_diffusion_timesteps):
                t1 = i / num_diffusion_timesteps
                t2 = (i + 1) / num_diffusion_timesteps
                betas.append(min(1 - alpha_bar(t2) / alpha_bar(t1), beta_end))
            betas = np.array(betas)
        else:  # "quad", "linear", "sigmoid": NumPy only, left out
            raise NotImplementedError(beta_schedule)
        assert betas.shape == (num_diffusion_timesteps,)
        return betas

    class DDIMSampler:
        def __init__(self, schedule_name: str, diff_train_steps: int, beta_start: float = 0.001,
                     beta_end: float = 0.2):
            betas = get_beta_schedule(schedule_name, beta_start=beta_start, beta_end=beta_end,
                                      num_diffusion_timesteps=diff_train_steps)
            self.betas = torch.tensor(betas).to(torch.float32)
            self.alpha = 1 - self.betas
            self.alpha_cumprod = torch.cumprod(self.alpha, dim=0)
            self.timesteps = np.arange(0, diff_train_steps)[::-1]
            self.num_train_steps = diff_train_steps
            self._num_inference_steps = 20
            self.eta = 0

        def _get_variance(self, timestep, prev_timestep):
            alpha_t = self.alpha_cumprod[timestep]
            alpha_prev = self.alpha_cumprod[prev_timestep] if prev_timestep >= 0 else torch.tensor(1.0)
            beta_t = (1 - alpha_t)
            beta_prev = (1 - alpha_prev)
            return (beta_prev / beta_t) / (1 - alpha_t / alpha_prev)

        @staticmethod
        def treshold_sample(sample, threshold: float = 0.9956, max_clip: float = 1):
            batch_size, channels, height, width = sample.shape
            dtype = sample.dtype
            if dtype not in (torch.float32, torch.float64):
                sample = sample.float()
            sample = sample.reshape(batch_size, channels * height * width)
            abs_sample = sample.abs()
            s = torch.quantile(abs_sample, threshold, dim=1)
            s = torch.clamp(s, min=1, max=max_clip)
            s = s.unsqueeze(1)
            sample = torch.clamp(sample, -s, s) / s
            sample = sample.reshape(batch_size, channels, height, width)
            sample = sample.to(dtype)
            return sample

        def set_infer_steps(self, num_steps: int, device):
            self._num_inference_steps = num_steps
            step_ratio = self.num_train_steps // self._num_inference_steps
            timesteps = (np.arange(0, num_steps) * step_ratio).round()[::-1].copy().astype(np.int64)
            self.timesteps = torch.from_numpy(timesteps).to(device)

        @torch.no_grad()
        def p_sample(self, x_t, t_now, pred_net):
            prev_timestep = t_now - self.num_train_steps // self._num_inference_steps
            alpha_t = self.alpha_cumprod[t_now]
            alpha_prev = self.alpha_cumprod[prev_timestep] if prev_timestep >= 0 else torch.tensor(1.0)
            var = self._get_variance(t_now, prev_timestep)
            eps = torch.randn_like(x_t).to(x_t.device)
            t_now = (torch.ones((x_t.shape[0],), device=x_t.device, dtype=torch.int32) * t_now).to(x_t.device)
            eta_t = pred_net(x_t, t_now)
            x0_t = (x_t - eta_t * (1 - alpha_t).sqrt()) / alpha_t.sqrt()
            c1 = self.eta * var.sqrt()
            c2 = ((1 - alpha_prev) - c1 ** 2).sqrt()
            x_tminus = alpha_prev.sqrt() * x0_t + c2 * eta_t + c1 * eps
            return x_tminus, x0_t

        def q_sample(self, x_t, timesteps):
            alpha_t = self.alpha_cumprod[timesteps].to(timesteps.device)
            alpha_t = alpha_t.flatten().to(x_t.device)[:, None, None, None]
            eps = torch.randn(*list(x_t.shape)).to(x_t.device)
            x_t = alpha_t.sqrt() * x_t + (1 - alpha_t).sqrt() * eps
            return x_t, eps

    class DiffusionModel:
        def __init__(self, main_net, ema_net=None, num_steps: int = 100, input_res=(32, 32), emma: float = 0.999,
                     noise_sch_name: str = 'cosv2', **noise_sch_kwargs):
            self.device = torch.get_default_device()  # torch.device('cuda' if torch.cuda.is_available() else 'cpu')
            self.eps_net = main_net.to(self.device)
            self.ema_net = ema_net if ema_net is not None else copy.deepcopy(main_net)
            self.ema_net = self.ema_net.to(self.device)
            self.ema_net.eval()
            self.steps = num_steps
            self.res = (3,) + input_res if isinstance(input_res, tuple) else [3] + input_res
            self.num_steps = num_steps
            self.scheduler = DDIMSampler(noise_sch_name, diff_train_steps=num_steps, **noise_sch_kwargs)
            self.emma = emma

        @torch.no_grad()
        def generate(self, num_samples: int = 1, num_infer_steps: int = 25, pred_net='ema', return_list=False,
                     x_t=None):
            shape = (num_samples,) + self.res if isinstance(self.res, tuple) else [num_samples] + self.res
            x_t = torch.randn(*shape).to(self.device) if x_t is None else x_t
            self.scheduler.set_infer_steps(num_infer_steps, x_t.device)
            pred_net = getattr(self, pred_net + "_net")
            xs = [x_t.cpu()]
            for step in range(num_infer_steps):
                t = self.scheduler.timesteps[step]
                x_t, _ = self.scheduler.p_sample(x_t, t, pred_net)
                xs.append(x_t.cpu())
            return xs[-1] if not return_list else xs

        def train_loss(self, input_batch, loss_type='l1_loss', **losskwargs):
            bs, _, _, _ = input_batch.shape
            t = torch.randint(0, self.num_steps, size=(bs,))
            x_t, eps = self.scheduler.q_sample(input_batch, t)
            t = t.int().to(input_batch.device)
            eps_pred = self.eps_net(x_t, t)
            loss = getattr(torch.nn.functional, loss_type)(eps_pred, eps, **losskwargs)
            return loss

        def update_emma(self):
            for p_ema, p in zip(self.ema_net.parameters(), self.eps_net.parameters()):
                p_ema.data = (1 - self.emma) * p.data + p_ema.data * self.emma

        def train(self):
            self.eps_net.train()

        def eval(self):
            self.eps_net.eval()

        def parameters(self):
            return self.eps_net.parameters()

        def save(self, file_name: str):
            if not os.path.exists(file_name):
                os.makedirs(file_name)
            ema_path = file_name + '/ema.pt'
            net_path = file_name + "/eps.pt"
            torch.save(self.ema_net.state_dict(), ema_path)
            torch.save(self.eps_net.state_dict(), net_path)

        def load(self, path_nets: str):
            pathes = [os.path.join(path_nets, p) for p in os.listdir(path_nets) if ("ema" in p or "eps" in p)]
            for index in range(len(pathes)):
                if "ema" in pathes[index]:
                    break
            ema_p = pathes[index]
            eps_p = pathes[int(not index)]
            map_loc = 'cpu' if not torch.cuda.is_available() else 'cuda'
            self.eps_net.load_state_dict(torch.load(eps_p, map_location=map_loc))
            self.ema_net.load_state_dict(torch.load(ema_p, map_location=map_loc))

    DEVICE = torch.get_default_device()
    Unet = DiffUnet(chs=32, chs_mult=[1, 2], attn_res=[4], block_depth=1, temb_dim=32, res=8, dropout=0.0)
    set_params(torch, Unet, seed)
    Unet = Unet.to(DEVICE)
    Model = DiffusionModel(Unet, num_steps=12, input_res=(8, 8))
    optim = torch.optim.AdamW(Unet.parameters(), 5e-4, weight_decay=0.01)
    print("number of parameters:{}".format(sum([p.numel() for p in Unet.parameters()])))

    mean = lambda x: sum(x) / len(x)  # noqa: E731

    def train_epoch(model, train_ds, opt, loss_type='mse_loss', num=5, max_norm=None, **kwargs):
        model.train()
        losses = []
        for i, inputs in enumerate(train_ds):
            inputs = inputs.to(DEVICE)
            opt.zero_grad()
            loss = model.train_loss(inputs, loss_type, **kwargs)
            loss.backward()
            if max_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            opt.step()
            loss = loss.item()
            losses.append(loss)
            model.update_emma()
            if (i + 1) % (len(train_ds) // num) == 0:
                print(f"Finished training on {100*(i+1)/len(train_ds):.1f}% of the dataset and loss:{loss:.3f}")
        return mean(losses)

    images = torch.tensor(np.random.default_rng(seed + 1).uniform(-1, 1, (4, 4, 3, 8, 8)), dtype=torch.float32)
    train_iter = [images[0], images[1]]  # DataLoader(train_ds, 150, ...) batches
    out = {"train_loss": train_epoch(Model, train_iter, optim, 'l1_loss', num=2, max_norm=1.0)}
    with torch.no_grad():
        out["val_loss"] = Model.train_loss(images[2].to(DEVICE), 'l1_loss').item()
    path = os.path.join(str(workdir), "DDIM0.05_model")
    Model.save(path)
    Model.load(path)
    out["sample"] = Model.generate(num_samples=2, num_infer_steps=3)
    out["xs"] = Model.generate(x_t=images[3][:2], num_infer_steps=3, return_list=True)
    out["thresholded"] = DDIMSampler.treshold_sample(images[3] * 1.5)
    out["alpha_cumprod"] = Model.scheduler.alpha_cumprod
    out["timesteps"] = Model.scheduler.timesteps.tolist()
    out["emb"] = get_timestep_embedding(torch.tensor([0, 3, 11]), 9)
    out["printed"] = printed
    out["ema"] = [p.detach().clone() for p in Model.ema_net.parameters()]
    return out


# ------------------------------------------------------------------------------------ SimCLR

def simclr(torch, set_params, seed=0, shuffle=True):
    """advanced_source/simclr_tutorial.py: the two-view generator (its torch.clip), random_split,
    the SimCLR model (encoder + projection head, the two-view forward and the downstream flag), the
    NT-Xent logits of contrastive_loss (boolean-mask indexing with ~MASK and LABELS.bool()), its
    training loop, then the frozen-encoder Classification with normalized logits and the accuracy.
    torchvision's resnet18 becomes a small CNN with the same num_classes head, STL10 a few random
    16x16 images, the augmentations NumPy noise; BATCH_SIZE 128 becomes 8, epochs 50/30 become 2/2,
    num_workers=os.cpu_count() becomes 0 (the parity run turns shuffling off: the two random streams differ)."""
    nn = torch.nn
    DataLoader, random_split = torch.utils.data.DataLoader, torch.utils.data.random_split
    rng = np.random.default_rng(seed)
    printed = []
    print = printed.append  # noqa: A001
    DEVICE = torch.get_default_device()  # torch.device("cuda" if torch.cuda.is_available() else "cpu")

    class ContrastiveLearningViewGenerator(object):
        def __init__(self, base_transform, n_views=2):
            self.base_transform = base_transform
            self.n_views = n_views

        def __call__(self, x):
            views = [self.base_transform(x) for i in range(self.n_views)]
            views = [torch.clip(view, 0.0, 1.0) for view in views]
            return views

    draws = {}

    def base_transforms(x):  # get_baseline_transform's crops, flips and colour jitter, as NumPy noise
        key = int(x[0, 0, 0].item() * 2 ** 24)  # per image (its first pixel) and draw: order-free
        draws[key] = draws.get(key, -1) + 1
        noise = np.random.default_rng([seed, key, draws[key]]).normal(scale=0.2, size=tuple(x.shape))
        return x + torch.tensor(noise, dtype=torch.float32)

    class FakeSTL10(torch.utils.data.Dataset):
        def __init__(self, images, labels, transform):
            self.images, self.labels, self.transform = images, labels, transform

        def __len__(self):
            return len(self.labels)

        def __getitem__(self, i):
            return self.transform(self.images[i]), int(self.labels[i])

    def stl10(n, transform):
        labels = rng.integers(0, 4, n)
        images = rng.random((n, 3, 16, 16)) * 0.5
        for i, c in enumerate(labels):
            images[i, c % 3, 4 * c:4 * c + 4] += 0.5  # the class is readable from the image
        return FakeSTL10(torch.tensor(images, dtype=torch.float32), labels, transform)

    custom_transform = ContrastiveLearningViewGenerator(base_transform=base_transforms)
    unlabeled_ds = stl10(8, custom_transform)
    BATCH_SIZE = 8
    train, _ = random_split(unlabeled_ds, [8, 0])  # [1_000, 99_000]: every image, in a random order
    del _
    del unlabeled_ds
    train_dl = torch.utils.data.DataLoader(train, batch_size=BATCH_SIZE, shuffle=shuffle, num_workers=0,
                                           drop_last=True)

    def resnet18(num_classes):  # models.resnet18(pretrained=False, num_classes=...), shrunk
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.AdaptiveAvgPool2d((2, 2)), nn.Flatten(), nn.Linear(32, num_classes))

    class SimCLR(nn.Module):
        def __init__(self, resnet_dim=1024, hidden_dim=512, out_dim=256, downstream_flag=False):
            super().__init__()
            self.downstream_flag = downstream_flag
            self.encoder = resnet18(num_classes=resnet_dim)
            self.projection = nn.Sequential(nn.Linear(resnet_dim, hidden_dim), nn.ReLU(),
                                            nn.Linear(hidden_dim, out_dim))

        def forward(self, x):
            if not self.downstream_flag:
                view1, view2 = x
                enc1 = self.encoder(view1)
                enc2 = self.encoder(view2)
                z1 = self.projection(enc1)
                z2 = self.projection(enc2)
                return z1, z2
            else:
                enc = self.encoder(x)
                return enc

    def contrastive_loss(features, temp, LABELS, MASK):
        SHAPE = BATCH_SIZE * 2
        features = torch.cat(features, dim=0)
        features = nn.functional.normalize(features, p=2, dim=1)
        similarity_matrix = torch.matmul(features, features.T)
        similarity_matrix = similarity_matrix[~MASK].view(SHAPE, -1)
        LABELS = LABELS[~MASK].view(SHAPE, -1)
        positives = similarity_matrix[LABELS.bool()].view(SHAPE, -1)
        negatives = similarity_matrix[~LABELS.bool()].view(SHAPE, -1)
        logits = torch.cat([positives, negatives], dim=1)
        labels = torch.zeros(logits.shape[0], dtype=torch.long).to(DEVICE)
        logits = logits / temp
        return logits, labels

    EYE_SHAPE = BATCH_SIZE * 2
    MASK = torch.eye(EYE_SHAPE, dtype=torch.bool).to(DEVICE)
    LABELS = torch.cat([torch.arange(BATCH_SIZE) for i in range(2)], dim=0)
    LABELS = (LABELS.unsqueeze(0) == LABELS.unsqueeze(1)).float()
    LABELS = LABELS.to(DEVICE)
    EPOCHS = 2
    simclr_model = SimCLR(resnet_dim=32, hidden_dim=16, out_dim=8).to(DEVICE)
    set_params(torch, simclr_model, seed, scale=0.2)
    criterion = nn.CrossEntropyLoss().to(DEVICE)
    optimizer = torch.optim.Adam(params=simclr_model.parameters(), lr=1e-1)
    out = {"logits": []}
    epoch_loss = []
    for epoch in range(EPOCHS):
        batch_loss = []
        for i, elements in enumerate(train_dl):
            views, _ = elements
            z1, z2 = simclr_model([view.to(DEVICE) for view in views])
            logits, labels = contrastive_loss([z1, z2], temp=1e-1, LABELS=LABELS, MASK=MASK)
            out["logits"].append((z1.detach(), z2.detach(), logits.detach()))
            optimizer.zero_grad()
            loss = criterion(logits, labels)
            loss.backward()
            optimizer.step()
            batch_loss.append(loss.item())
        total_loss = sum(batch_loss) / len(batch_loss)
        epoch_loss.append(total_loss)
        print(f'EPOCH: {epoch+1} LOSS: {(total_loss):.3f}')
    out["simclr_loss"] = epoch_loss

    labeled_ds = stl10(16, lambda x: x)
    test_ds = stl10(8, lambda x: x)
    nu_classes = 4
    train_dl = DataLoader(labeled_ds, batch_size=BATCH_SIZE, shuffle=shuffle, num_workers=0, drop_last=True)
    test_dl = DataLoader(test_ds, batch_size=BATCH_SIZE, shuffle=shuffle, num_workers=0, drop_last=True)

    class Classification(nn.Module):
        def __init__(self, model, nu_classes, simclr_dim=1024):
            super().__init__()
            simclr = model
            simclr.downstream_flag = True
            self.simclr = simclr
            for param in self.simclr.parameters():
                param.requires_grad = False
            self.linear = nn.Linear(simclr_dim, nu_classes)

        def forward(self, x):
            encoding = self.simclr(x)
            pred = self.linear(encoding)
            pred = nn.functional.normalize(pred, p=2, dim=1)
            return pred

    simclr_dim = 32
    classification_model = Classification(simclr_model, nu_classes, simclr_dim=simclr_dim).to(DEVICE)
    set_params(torch, classification_model.linear, seed + 1, scale=0.2)
    criterion = nn.CrossEntropyLoss().to(DEVICE)
    optimizer = torch.optim.Adam(classification_model.parameters())
    out["trainable"] = [n for n, p in classification_model.named_parameters() if p.requires_grad]
    epoch_loss = []
    for epoch in range(2):
        batch_loss = []
        for i, element in enumerate(train_dl):
            images, labels = element
            images = images.to(DEVICE)
            labels = labels.to(DEVICE)
            preds = classification_model(images)
            loss = criterion(preds, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batch_loss.append(loss.item())
        epoch_loss.append(sum(batch_loss) / len(batch_loss))
    out["classifier_loss"] = epoch_loss
    correct = 0
    total = 0
    with torch.no_grad():
        for data in test_dl:
            images, labels = data
            images = images.to(DEVICE)
            labels = labels.to(DEVICE)
            preds = classification_model(images)
            _, predicted = torch.max(preds, 1)
            correct += (predicted == labels).sum().item()
            total += 1
            out["preds"] = preds
    print(f'Accuracy: {(correct/(BATCH_SIZE*total)*100):.2f}%')
    out["printed"] = printed
    return out


# ------------------------------------------------------------------------------------ Speech commands (M5)

def speech_commands(torch, set_params, seed=0, shuffle=True):
    """speech_command_classification_with_torchaudio_tutorial.py from the labels on: label_to_index /
    index_to_label, the pad_sequence collate_fn (``.t()``, ``pad_sequence(batch_first=True)``,
    ``permute``), M5 (Conv1d k=80 s=16, BatchNorm1d, MaxPool1d, ``F.avg_pool1d(x, x.shape[-1])``,
    ``log_softmax(dim=2)``), Adam(weight_decay) + StepLR, train/test with ``F.nll_loss(output.squeeze(),
    target)`` and predict. SPEECHCOMMANDS becomes 16 kHz tones of 4 "words" (a frequency each) of
    ragged lengths; torchaudio's Resample(16000, 8000) is a two-tap average; tqdm and audio players
    are left out; 2 epochs of 2 batches of 8."""
    nn = torch.nn
    F = torch.nn.functional
    optim = torch.optim
    device = str(torch.get_default_device())
    rng = np.random.default_rng(seed)
    printed = []
    print = lambda *a: printed.append(" ".join(str(x) for x in a))  # noqa: E731,A001

    labels = ["go", "no", "stop", "yes"]

    def make_set(n):
        items = []
        for i in range(n):
            word = labels[i % 4]
            length = int(rng.integers(15200, 16001))
            t = np.arange(length) / 16000
            wave = 0.5 * np.sin(2 * np.pi * (300 + 400 * (i % 4)) * t) + 0.1 * rng.standard_normal(length)
            items.append((torch.tensor(wave[None], dtype=torch.float32), 16000, word, "speaker", 0))
        return items

    train_set, test_set = make_set(16), make_set(8)

    class Resample(nn.Module):  # torchaudio.transforms.Resample(orig_freq=16000, new_freq=8000), as a 2-tap mean
        def forward(self, x):
            n = x.shape[-1] // 2 * 2
            return x[..., :n].reshape(*x.shape[:-1], n // 2, 2).mean(-1)

    transform = Resample()

    def label_to_index(word):
        return torch.tensor(labels.index(word))

    def index_to_label(index):
        return labels[index]

    word_start = "yes"
    index = label_to_index(word_start)
    word_recovered = index_to_label(index)
    print(word_start, "-->", index, "-->", word_recovered)

    def pad_sequence(batch):
        batch = [item.t() for item in batch]
        batch = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True, padding_value=0.)
        return batch.permute(0, 2, 1)

    def collate_fn(batch):
        tensors, targets = [], []
        for waveform, _, label, *_ in batch:
            tensors += [waveform]
            targets += [label_to_index(label)]
        tensors = pad_sequence(tensors)
        targets = torch.stack(targets)
        return tensors, targets

    batch_size = 8
    if device == "cuda":
        num_workers = 1
        pin_memory = True
    else:
        num_workers = 0
        pin_memory = False
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=shuffle,
                                               collate_fn=collate_fn, num_workers=num_workers, pin_memory=pin_memory)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=batch_size, shuffle=False, drop_last=False,
                                              collate_fn=collate_fn, num_workers=num_workers, pin_memory=pin_memory)

    class M5(nn.Module):
        def __init__(self, n_input=1, n_output=35, stride=16, n_channel=32):
            super().__init__()
            self.conv1 = nn.Conv1d(n_input, n_channel, kernel_size=80, stride=stride)
            self.bn1 = nn.BatchNorm1d(n_channel)
            self.pool1 = nn.MaxPool1d(4)
            self.conv2 = nn.Conv1d(n_channel, n_channel, kernel_size=3)
            self.bn2 = nn.BatchNorm1d(n_channel)
            self.pool2 = nn.MaxPool1d(4)
            self.conv3 = nn.Conv1d(n_channel, 2 * n_channel, kernel_size=3)
            self.bn3 = nn.BatchNorm1d(2 * n_channel)
            self.pool3 = nn.MaxPool1d(4)
            self.conv4 = nn.Conv1d(2 * n_channel, 2 * n_channel, kernel_size=3)
            self.bn4 = nn.BatchNorm1d(2 * n_channel)
            self.pool4 = nn.MaxPool1d(4)
            self.fc1 = nn.Linear(2 * n_channel, n_output)

        def forward(self, x):
            x = self.conv1(x)
            x = F.relu(self.bn1(x))
            x = self.pool1(x)
            x = self.conv2(x)
            x = F.relu(self.bn2(x))
            x = self.pool2(x)
            x = self.conv3(x)
            x = F.relu(self.bn3(x))
            x = self.pool3(x)
            x = self.conv4(x)
            x = F.relu(self.bn4(x))
            x = self.pool4(x)
            x = F.avg_pool1d(x, x.shape[-1])
            x = x.permute(0, 2, 1)
            x = self.fc1(x)
            return F.log_softmax(x, dim=2)

    waveform = train_set[0][0]
    transformed = transform(waveform)
    model = M5(n_input=transformed.shape[0], n_output=len(labels), n_channel=8)
    set_params(torch, model, seed, scale=0.1)
    model.to(device)

    def count_parameters(model):
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    n = count_parameters(model)
    print("Number of parameters: %s" % n)
    optimizer = optim.Adam(model.parameters(), lr=0.01, weight_decay=0.0001)
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)  # step_size=20, shrunk
    losses = []

    def train(model, epoch, log_interval):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            data = data.to(device)
            target = target.to(device)
            data = transform(data)
            output = model(data)
            loss = F.nll_loss(output.squeeze(), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if batch_idx % log_interval == 0:
                print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)} "
                      f"({100. * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}")
            losses.append(loss.item())

    def number_of_correct(pred, target):
        return pred.squeeze().eq(target).sum().item()

    def get_likely_index(tensor):
        return tensor.argmax(dim=-1)

    def test(model, epoch):
        model.eval()
        correct = 0
        for data, target in test_loader:
            data = data.to(device)
            target = target.to(device)
            data = transform(data)
            output = model(data)
            pred = get_likely_index(output)
            correct += number_of_correct(pred, target)
        print(f"\nTest Epoch: {epoch}\tAccuracy: {correct}/{len(test_loader.dataset)} "
              f"({100. * correct / len(test_loader.dataset):.0f}%)\n")

    log_interval = 1
    n_epoch = 2
    transform = transform.to(device)
    for epoch in range(1, n_epoch + 1):
        train(model, epoch, log_interval)
        test(model, epoch)
        scheduler.step()

    def predict(tensor):
        tensor = tensor.to(device)
        tensor = transform(tensor)
        tensor = model(tensor.unsqueeze(0))
        tensor = get_likely_index(tensor)
        tensor = index_to_label(tensor.squeeze())
        return tensor

    waveform, sample_rate, utterance, *_ = train_set[-1]
    print(f"Expected: {utterance}. Predicted: {predict(waveform)}.")
    return {"printed": printed, "losses": losses, "lr": scheduler.get_last_lr(), "model": model,
            "transform": transform, "batch": collate_fn(train_set[:3]),
            "lengths": [w.shape[-1] for w, *_ in train_set[:3]]}


# ------------------------------------------------------------------------------------ tests: A3C

def _a3c_first_loss_numpy(out, seed=1032):
    """The first batch's loss in float64 NumPy from the NumPy-drawn start (the page's formula)."""
    rng = np.random.default_rng(seed)
    shapes = [(16, 4), (16,), (8, 16), (8,), (2, 8), (2,), (1, 8), (1,)]
    w = [rng.normal(scale=0.3, size=s) for s in shapes]
    s, a = out["batches"][0]
    R = out["R"][0].astype(np.float64)
    y = np.maximum(s.astype(np.float64) @ w[0].T + w[1], 0)
    y = np.maximum(y @ w[2].T + w[3], 0)
    logit, value = y @ w[4].T + w[5], y @ w[6].T + w[7]
    logp = logit - np.log(np.exp(logit).sum(1, keepdims=True))
    res = R - value
    return np.mean(-(logp * a).sum(1) * res[:, 0]) + np.mean(res ** 2)


def test_a3c():
    _cpu_only("the page plays on the host (device = torch.device('cpu'), .detach().numpy() feeds np.random.choice)")
    out = a3c(lucid, _set_a3c)
    assert out["names"] == ["bottom.layer_0.weight", "bottom.layer_0.bias", "bottom.layer_1.weight",
                            "bottom.layer_1.bias", "policy_layer_.weight", "policy_layer_.bias",
                            "value_layer_.weight", "value_layer_.bias"]
    assert len(out["losses"]) == 6 and all(np.isfinite(out["losses"]))
    gamma = 0.995
    for R in out["R"]:  # the returns' recursion, R[i] = r + gamma * R[i + 1] (every reward is 1)
        np.testing.assert_allclose(R[:-1, 0], 1.0 + gamma * R[1:, 0], rtol=1e-6)
    assert any(R[-1, 0] == 1.0 for R in out["R"])  # an episode's end: no bootstrap value
    np.testing.assert_allclose(out["losses"][0], _a3c_first_loss_numpy(out), rtol=1e-5)


@pytest.mark.filterwarnings("ignore:Creating a tensor from a list of numpy.ndarrays")
def test_a3c_torch_parity():
    _cpu_only("the page plays on the host")
    torch = _reference_torch()
    ours, ref = a3c(lucid, _set_a3c), a3c(torch, _set_a3c)
    assert ours["actions"] == ref["actions"]
    np.testing.assert_allclose(ours["losses"], ref["losses"], rtol=1e-5)
    for a, b in zip(ours["params"], ref["params"]):
        np.testing.assert_allclose(a, b, atol=1e-6)


# ------------------------------------------------------------------------------------ tests: Mario

def test_mario(tmp_path):
    log = mario(lucid, _set_from_numpy, tmp_path)
    assert log["printed"] == [f"MarioNet saved to {tmp_path / 'mario_net_1.chkpt'} at step 6",
                              f"MarioNet saved to {tmp_path / 'mario_net_2.chkpt'} at step 12"]
    ckpt = lucid.load(tmp_path / "mario_net_2.chkpt")
    assert sorted(ckpt) == ["exploration_rate", "model"] and ckpt["exploration_rate"] == 0.1
    assert sorted({k.split(".")[0] for k in ckpt["model"]}) == ["online", "target"]
    assert len(log["loss"]) == 5 and all(np.isfinite(log["loss"]))  # steps 4, 6, ..., 12
    agent = agent_net = log["mario"]
    agent_net = agent.net
    assert not any(p.requires_grad for p in agent_net.target.parameters())
    random.seed(3)
    state, next_state, action, reward, done = agent.recall()
    assert tuple(state.shape) == (4, 4, 84, 84) and tuple(action.shape) == (4,) and done.dtype == lucid.bool
    est = npy(agent.td_estimate(state, action))
    tgt = agent.td_target(reward, next_state, done)
    assert not tgt.requires_grad
    with lucid.no_grad():
        q, q_next, q_tgt = (npy(agent_net(x, model=m)) for x, m in
                            ((state, "online"), (next_state, "online"), (next_state, "target")))
    a, r, d = npy(action), npy(reward), npy(done)
    np.testing.assert_allclose(est, q[np.arange(4), a], rtol=1e-6)
    best = q_next.argmax(1)
    np.testing.assert_allclose(npy(tgt), r + (1 - d) * 0.9 * q_tgt[np.arange(4), best], rtol=1e-5)


def test_mario_torch_parity(tmp_path):
    torch = _reference_torch()
    ours = mario(lucid, _set_from_numpy, tmp_path / "lucid")
    ref = mario(torch, _set_from_numpy, tmp_path / "torch")
    assert ours["actions"] == ref["actions"]
    np.testing.assert_allclose(ours["loss"], ref["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ours["q"], ref["q"], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------ tests: autoencoders

def _leaky(x):
    return np.where(x > 0, x, 0.01 * x)


def test_autoencoders():
    host = lucid.get_default_device().type == "cpu"  # the page's display helpers call .numpy()
    out = autoencoders(lucid, _set_from_numpy, host=host)
    assert out["shapes"] == [(32, 1, 28, 28)]
    losses = out["losses"]
    assert [len(x) for x in losses] == [2, 1, 1, 1] and losses[0][1] < losses[0][0]
    # the first loss in NumPy: MSE of the linear autoencoder at its NumPy-drawn start (order-free)
    rng = np.random.default_rng(0)
    x = rng.random((32, 1, 28, 28)).astype(np.float32).astype(np.float64).reshape(32, 784)
    w = np.random.default_rng(0)
    ws = [w.normal(scale=0.05, size=s) for s in [(196, 784), (196,), (98, 196), (98,), (196, 98), (196,),
                                                  (784, 196), (784,)]]
    h = _leaky(x @ ws[0].T + ws[1])
    h = _leaky(h @ ws[2].T + ws[3])
    h = _leaky(h @ ws[4].T + ws[5])
    y = 1 / (1 + np.exp(-(h @ ws[6].T + ws[7])))
    np.testing.assert_allclose(losses[0][0], np.mean((y - x) ** 2), rtol=1e-5)
    assert tuple(out["code"].shape) == (12, 12)
    images, rebuilt = out["cifar"]
    assert tuple(rebuilt.shape) == tuple(images.shape) == (8, 3, 32, 32)
    r = npy(rebuilt)
    assert ((r > 0) & (r < 1)).all()
    if host:
        noisy, denoised = out["noisy"]
        assert noisy.shape == denoised.shape == (28, 28) and noisy.min() >= 0 and noisy.max() <= 1


def test_autoencoders_torch_parity():
    torch = _reference_torch()
    ours, ref = autoencoders(lucid, _set_from_numpy), autoencoders(torch, _set_from_numpy)
    for a, b in zip(ours["losses"], ref["losses"]):  # one shuffled batch an epoch: order-free up to rounding
        np.testing.assert_allclose(a, b, rtol=1e-5)


# ------------------------------------------------------------------------------------ tests: building blocks

@pytest.fixture(autouse=True)
def _matmul_precision_restored():
    """The building-blocks page sets the process-wide float32 matmul precision (in both
    libraries); put it back, so later tests in the worker see the default."""
    saved = lucid.get_float32_matmul_precision()
    torch = sys.modules.get("torch")
    saved_torch = torch.get_float32_matmul_precision() if torch is not None else None
    yield
    lucid.set_float32_matmul_precision(saved)
    if saved_torch is not None:
        sys.modules["torch"].set_float32_matmul_precision(saved_torch)


def test_transformer_building_blocks():
    out = transformer_building_blocks(lucid)
    lengths = out["lengths"]
    assert max(lengths) > min(lengths)
    # self attention: equal on the sequences; the padded rows of nn.MultiheadAttention keep the output
    # projection's bias (its attention rows are fully masked: 0), where the nested result pads with 0
    bias = npy(out["out_bias"])
    van = npy(out["vanilla_self"])
    np.testing.assert_allclose(out["self_diff"], np.abs(bias).max(), rtol=1e-6)
    for i, n in enumerate(lengths):
        np.testing.assert_allclose(van[i, n:], np.broadcast_to(bias, van[i, n:].shape), atol=1e-6)
    assert max(out["grad_diffs"]) < 1e-5 and out["cross_diff"] < 1e-5
    assert out["packed_diff"] < 1e-6 and out["swiglu_diff"] < 1e-6
    assert out["swiglu_hidden"] == 32  # 16 * ceil(int(2 * 32 / 3) / 16)


def test_transformer_building_blocks_torch_parity(monkeypatch):
    torch = _reference_torch()
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: model)  # eager, as Lucid's compile: seconds saved
    ours, ref = transformer_building_blocks(lucid), transformer_building_blocks(torch, nested=False)
    assert ours["lengths"] == ref["lengths"]
    np.testing.assert_allclose(npy(ours["vanilla_self"]), npy(ref["vanilla_self"]), atol=1e-5)
    for a, b in zip(ours["vanilla_grads"], ref["vanilla_grads"]):
        np.testing.assert_allclose(npy(a), npy(b), atol=1e-4)


# ------------------------------------------------------------------------------------ tests: the maths page

def _no_address(lines):
    return [re.sub(r" object at 0x[0-9a-f]+", "", line) for line in lines]


def test_math_behind_training():
    lines, (w1, b1), w, b = math_behind_training(lucid)
    lines = _no_address(lines)
    assert lines.count("Match: True") == 3 and "Autograd:  dz/dx = 12.0" in lines
    assert "  dL/dW = [[2.0, 1.0], [2.0, 1.0]]" in lines and "  dL/db = [1.0, 1.0]" in lines
    i = lines.index("z.grad_fn = <AddBackward0>")
    assert lines[i - 1] == "y.grad_fn = <PowBackward0>"
    assert lines[i + 1:i + 5] == ["<AddBackward0>", "  <MulBackward0>", "    <PowBackward0>", "      <AccumulateGrad>"]
    assert "Weight gradient: -4.9422" in lines and "\nWeight after step:  0.4867" in lines
    # the 200 SGD steps on y = 3x + 1 in float64 NumPy
    X = np.linspace(0, 1, 50, dtype=np.float32).astype(np.float64)
    W, B = -0.0075, 0.5364
    for _ in range(200):
        r = W * X + B - (3 * X + 1)
        W, B = W - 0.1 * np.mean(2 * r * X), B - 0.1 * np.mean(2 * r)
    np.testing.assert_allclose([w1, b1], [W, B], rtol=1e-4)
    np.testing.assert_allclose(w + [b], [2.0, -1.0, 0.5, 0.3], atol=0.03)


def test_math_behind_training_torch_parity():
    torch = _reference_torch()
    ours, ref = math_behind_training(lucid), math_behind_training(torch)
    assert _no_address(ours[0]) == _no_address(ref[0])
    np.testing.assert_allclose(ours[1] + tuple(ours[2]) + (ours[3],), ref[1] + tuple(ref[2]) + (ref[3],), rtol=1e-5)


# ------------------------------------------------------------------------------------ the fix: nested flex

def test_flex_attention_on_nested_inputs_is_refused_as_in_pytorch():
    msg, has_nested_mask = flex_attention_on_nested(lucid)  # was a ValueError about key/value shapes
    assert msg.startswith("flex_attention does not support NestedTensor inputs") and not has_nested_mask
    from lucid.nn.attention.flex_attention import flex_attention
    nt = lucid.nested.nested_tensor([lucid.zeros(2, 2, 4), lucid.zeros(1, 2, 4)], layout=lucid.jagged)
    x = nt.transpose(1, 2)  # one structure for all three: matmul's RuntimeError deep inside before
    with pytest.raises(NotImplementedError, match="Convert inputs to dense tensors"):
        flex_attention(x, x, x)
    with pytest.raises(NotImplementedError, match="does not support NestedTensor"):
        flex_attention(lucid.zeros(1, 2, 2, 4), x, x)


def test_flex_attention_on_nested_inputs_torch_parity():
    torch = _reference_torch()
    assert flex_attention_on_nested(lucid) == flex_attention_on_nested(torch)


# ------------------------------------------------------------------------------------ tests: nn package

def _numbers(line):
    return [float(x) for x in re.findall(r"-?\d+\.\d+", line)]


def test_nn_package():
    with pytest.warns(FutureWarning, match="forward contains multiple autograd Nodes"):
        lines = nn_package(lucid, _set_from_numpy)
    assert lines.count("Inside Conv2d forward") == 2 and lines.count("Inside Conv2d backward") == 1
    assert "input size: (1, 10, 12, 12)" in lines and "grad_output size: (1, 20, 8, 8)" in lines
    # the deprecated hook sees the convolution node's three input gradients, as PyTorch's
    assert "grad_input sizes: [(1, 10, 12, 12), (20, 10, 5, 5), (20,)]" in lines
    assert lines[1 + lines.index("grad_input:  tuple")] == "grad_input[0]:  Tensor"


@pytest.mark.filterwarnings("ignore:Using a non-full backward hook")
def test_nn_package_torch_parity():
    torch = _reference_torch()
    ours, ref = nn_package(lucid, _set_from_numpy), nn_package(torch, _set_from_numpy)
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        b = re.sub(r"torch\.Size\(\[([^\]]*)\]\)", lambda m: "(" + m.group(1) + ("," if "," not in m.group(1) else "")
                   + ")", b)  # shapes print as tuples in Lucid (README "Differences from PyTorch")
        if _numbers(a):
            np.testing.assert_allclose(_numbers(a), _numbers(b), rtol=1e-5)
        else:
            assert a == b


# ------------------------------------------------------------------------------------ the fix: non-full hooks

def test_non_full_backward_hook_sees_the_node_that_made_the_output():
    conv = lucid.nn.Conv2d(2, 3, 3).double()
    x0 = lucid.randn(1, 2, 5, 5, dtype=lucid.float64, requires_grad=True)
    seen = []
    conv.register_backward_hook(lambda m, gi, go: seen.append((m, gi, go)))
    with pytest.warns(FutureWarning, match="multiple autograd Nodes"):  # weight and bias are not inputs
        y = conv(x0 * 2)
    (y ** 2).sum().backward()
    (m, gi, go), = seen
    assert m is conv and len(gi) == 3 and len(go) == 1
    lucid.testing.assert_close(go[0], 2 * y.detach())
    lucid.testing.assert_close(gi[1], conv.weight.grad)
    lucid.testing.assert_close(gi[2], conv.bias.grad)
    lucid.testing.assert_close(2 * gi[0], x0.grad)


def test_non_full_backward_hook_can_replace_grad_input_and_stays_silent_for_one_node():
    tanh = lucid.nn.Tanh()
    x0 = lucid.tensor([0.3, -1.2, 2.0], dtype=lucid.float64, requires_grad=True)
    tanh.register_backward_hook(lambda m, gi, go: (3 * gi[0],))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one node whose input is the module's input: no warning
        y = tanh(x0 * 1)
    y.sum().backward()
    t = np.tanh(np.array([0.3, -1.2, 2.0]))
    np.testing.assert_allclose(npy(x0.grad), 3 * (1 - t ** 2), rtol=1e-12)


def test_non_full_and_full_backward_hooks_do_not_mix():
    lin = lucid.nn.Linear(2, 2)
    handle = lin.register_backward_hook(lambda m, gi, go: None)
    with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full backward hooks"):
        lin.register_full_backward_hook(lambda m, gi, go: None)
    handle.remove()
    lin.register_full_backward_hook(lambda m, gi, go: None)
    with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full backward hooks"):
        lin.register_backward_hook(lambda m, gi, go: None)


def test_global_non_full_backward_hook():
    from lucid.nn.modules.module import register_module_backward_hook, register_module_full_backward_hook
    conv = lucid.nn.Conv2d(1, 2, 2)
    seen = []
    handle = register_module_backward_hook(lambda m, gi, go: seen.append((type(m).__name__, len(gi))))
    try:
        with pytest.raises(RuntimeError, match="as a global Module hook"):
            register_module_full_backward_hook(lambda m, gi, go: None)
        with pytest.warns(FutureWarning, match="multiple autograd Nodes"):
            y = conv(lucid.randn(1, 1, 3, 3) * 1)
    finally:
        handle.remove()
    y.sum().backward()
    assert seen == [("Conv2d", 3)]


# ------------------------------------------------------------------------------------ tests: DDIM

def test_ddim(tmp_path):
    out = ddim(lucid, _set_from_numpy, tmp_path)
    assert out["printed"][0].startswith("number of parameters:") and len(out["printed"]) == 3
    assert np.isfinite(out["train_loss"]) and np.isfinite(out["val_loss"])
    assert sorted(os.listdir(tmp_path / "DDIM0.05_model")) == ["ema.pt", "eps.pt"]
    # the cosv2 schedule and its cumulative product, in float64 NumPy
    ab = lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    betas = np.array([min(1 - ab((i + 1) / 12) / ab(i / 12), 0.2) for i in range(12)])
    np.testing.assert_allclose(npy(out["alpha_cumprod"]), np.cumprod(1 - betas), rtol=1e-6)
    assert out["timesteps"] == [8, 4, 0]
    # the sinusoidal embedding of an odd width: 4 frequencies, sin then cos, one zero column
    f = np.exp(np.arange(4) * -(math.log(1000) / 3))
    arg = np.array([0, 3, 11])[:, None] * f[None]
    ref = np.concatenate([np.sin(arg), np.cos(arg), np.zeros((3, 1))], 1)
    np.testing.assert_allclose(npy(out["emb"]), ref, rtol=1e-5, atol=1e-6)
    # treshold_sample with max_clip=1: the quantile is clamped to 1, i.e. plain clipping to [-1, 1]
    imgs = np.random.default_rng(1).uniform(-1, 1, (4, 4, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(npy(out["thresholded"]), np.clip(imgs[3] * 1.5, -1, 1), rtol=1e-6)
    xs = out["xs"]
    assert len(xs) == 4 and xs[0].device.type == "cpu" and tuple(xs[-1].shape) == (2, 3, 8, 8)
    np.testing.assert_array_equal(npy(xs[0]), imgs[3][:2])
    assert np.isfinite(npy(out["sample"])).all()


def test_ddim_torch_parity(tmp_path):
    torch = _reference_torch()
    ours, ref = ddim(lucid, _set_from_numpy, tmp_path / "l"), ddim(torch, _set_from_numpy, tmp_path / "t")
    assert ours["printed"] == ref["printed"] and ours["timesteps"] == ref["timesteps"]
    np.testing.assert_allclose([ours["train_loss"], ours["val_loss"]], [ref["train_loss"], ref["val_loss"]], rtol=1e-5)
    for k in ("sample", "thresholded", "emb"):
        np.testing.assert_allclose(npy(ours[k]), npy(ref[k]), atol=1e-5)
    for a, b in zip(ours["xs"] + ours["ema"], ref["xs"] + ref["ema"]):
        np.testing.assert_allclose(npy(a), npy(b), atol=1e-5)


# ------------------------------------------------------------------------------------ tests: SimCLR

def test_simclr():
    out = simclr(lucid, _set_from_numpy)
    assert out["printed"][:2] == [f"EPOCH: {e + 1} LOSS: {x:.3f}" for e, x in enumerate(out["simclr_loss"])]
    assert re.fullmatch(r"Accuracy: \d+\.\d\d%", out["printed"][2])
    assert out["trainable"] == ["linear.weight", "linear.bias"]  # the SimCLR encoder is frozen
    # the NT-Xent logits in float64 NumPy: cosine similarities without the diagonal, positive first, / 0.1
    for z1, z2, logits in out["logits"]:
        f = np.concatenate([npy(z1), npy(z2)]).astype(np.float64)
        f /= np.linalg.norm(f, axis=1, keepdims=True)
        sim = f @ f.T
        n, cols = len(f), np.arange(len(f))
        partner = (cols + n // 2) % n  # the other view of the same image
        pos = sim[cols, partner]
        neg = np.stack([sim[i][(cols != i) & (cols != partner[i])] for i in range(n)])
        np.testing.assert_allclose(npy(logits), np.concatenate([pos[:, None], neg], 1) / 0.1, rtol=1e-5, atol=1e-5)
    assert out["simclr_loss"][1] < out["simclr_loss"][0]
    np.testing.assert_allclose(np.linalg.norm(npy(out["preds"]), axis=1), 1.0, rtol=1e-6)


def test_simclr_torch_parity():
    torch = _reference_torch()
    ours, ref = simclr(lucid, _set_from_numpy, shuffle=False), simclr(torch, _set_from_numpy, shuffle=False)
    assert ours["printed"] == ref["printed"]
    np.testing.assert_allclose(ours["simclr_loss"] + ours["classifier_loss"],
                               ref["simclr_loss"] + ref["classifier_loss"], rtol=1e-5)


# ------------------------------------------------------------------------------------ tests: speech commands

def test_speech_commands():
    out = speech_commands(lucid, _set_from_numpy)
    p = out["printed"]
    assert re.fullmatch(r"yes --> tensor\(3(, device='[^']+')?\) --> yes", p[0])  # the device shows off the CPU
    # M5 with 8 channels, 4 words: conv 8*80+8, 8*8*3+8, 16*8*3+16, 16*16*3+16, 4 BatchNorms, fc 16*4+4
    assert p[1] == "Number of parameters: 2196"
    assert p[2].startswith("Train Epoch: 1 [0/16 (0%)]\tLoss: ") and p[3].startswith("Train Epoch: 1 [8/16 (50%)]")
    assert re.fullmatch(r"\nTest Epoch: 1\tAccuracy: \d/8 \(\d+%\)\n", p[4])
    assert re.fullmatch(r"Expected: yes\. Predicted: (go|no|stop|yes)\.", p[-1])
    assert len(out["losses"]) == 4 and all(np.isfinite(out["losses"]))
    np.testing.assert_allclose(out["lr"], [0.01 * 0.1 ** 2])
    tensors, targets = out["batch"]  # the collate_fn: zero-padded to the longest, (B, 1, L), int64 targets
    L = max(out["lengths"])
    assert tuple(tensors.shape) == (3, 1, L) and targets.tolist() == [0, 1, 2]
    x = npy(tensors)
    for i, n in enumerate(out["lengths"]):
        assert (x[i, 0, n:] == 0).all() and (x[i, 0, :n] != 0).any()
    with lucid.no_grad():
        logp = out["model"](out["transform"](tensors))
    assert tuple(logp.shape) == (3, 1, 4)
    np.testing.assert_allclose(np.exp(npy(logp)).sum(-1), 1.0, rtol=1e-5)


def test_speech_commands_torch_parity():
    torch = _reference_torch()
    ours = speech_commands(lucid, _set_from_numpy, shuffle=False)
    ref = speech_commands(torch, _set_from_numpy, shuffle=False)
    no_loss = lambda lines: [re.sub(r"Loss: \S+|, device='[^']+'", "", x) for x in lines]  # noqa: E731
    assert no_loss(ours["printed"]) == no_loss(ref["printed"])
    np.testing.assert_allclose(ours["losses"], ref["losses"], rtol=1e-5)
