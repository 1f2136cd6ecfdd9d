"""pytorch/examples scripts run on Lucid: ``gcn/main.py`` (its ``load_cora`` preprocessing with
``lucid.sparse``: ``to_sparse``, ``sparse_coo_tensor``, sparse @ dense, ``spmm``), ``gat/main.py``,
``regression/main.py`` and ``reinforcement_learning/reinforce.py`` + ``actor_critic.py``
(``Categorical``; a tiny hand-written environment in place of gym's CartPole). Cora is replaced by
a small random graph with the same preprocessing; epochs are cut to a few steps.
"""
from collections import deque, namedtuple
from itertools import count

import numpy as np
import pytest

import lucid as torch
import lucid.nn as nn
import lucid.nn.functional as F
import lucid.optim as optim
from lucid.distributions import Categorical
from lucid.optim import Adam
from lucid.sparse import _ops as _sparse_ops


def _needs_cpu_default(why="the script pins device='cpu' / builds its data with NumPy (torch.from_numpy), "
                           "as the example does; with another default device PyTorch mixes devices too"):
    """These scripts are host-bound as written: the strict stand-in passes run the others."""
    if torch.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(torch.get_default_device()))


# gcn's torch.spmm: lucid/__init__.py does not re-export lucid.sparse._ops.spmm yet (see the report)
spmm = torch.spmm


# ------------------------------------------------------------------------------------ gcn / gat
def _cora_like(V=30, n_feat=12, n_cls=3, seed=0):
    """A graph of 3 communities whose node features hint at the class (Cora's layout: binary
    word features, integer node ids, a citation list of id pairs)."""
    rng = np.random.RandomState(seed)
    labels = np.arange(V) % n_cls
    feats = (rng.rand(V, n_feat) < 0.15).astype(np.int32)
    feats[np.arange(V), labels * 4 + rng.randint(0, 4, V)] = 1
    feats[0] = 0  # a node without words: its scale 1/0 = inf is zeroed as in load_cora
    edges = [(i, j) for i in range(V) for j in range(i + 1, V)
             if (labels[i] == labels[j] and rng.rand() < 0.3) or rng.rand() < 0.02]
    return feats, np.array(edges, dtype=np.int32), labels


def load_cora(feats, edges, labels_np, device='cpu', normalize=True):
    features = torch.FloatTensor(feats)
    scale_vector = torch.sum(features, dim=1)
    scale_vector = 1 / scale_vector
    scale_vector[scale_vector == float('inf')] = 0
    scale_vector = torch.diag(scale_vector).to_sparse()
    features = scale_vector @ features
    labels = torch.LongTensor(labels_np)
    V = len(labels_np)
    E = edges.shape[0]
    adj_mat = torch.sparse_coo_tensor(edges.T, torch.ones(E), (V, V), dtype=torch.int64)
    adj_mat = torch.eye(V) + adj_mat
    if not normalize:  # gat/main.py stops here
        return features.to(device), labels.to(device), adj_mat.to(device)
    degree_mat = torch.sum(adj_mat, dim=1)
    degree_mat = torch.sqrt(1 / degree_mat)
    degree_mat[degree_mat == float('inf')] = 0
    degree_mat = torch.diag(degree_mat).to_sparse()
    adj_mat = degree_mat @ adj_mat @ degree_mat
    return features.to_sparse().to(device), labels.to(device), adj_mat.to_sparse().to(device)


class GraphConv(nn.Module):
    def __init__(self, input_dim, output_dim, use_bias=False):
        super(GraphConv, self).__init__()
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))  # the example's legacy constructor
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)
        output = spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super(GCN, self).__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x, dim=1)


def train_iter(epoch, model, optimizer, criterion, input, target, mask_train, mask_val):
    model.train()
    optimizer.zero_grad()
    output = model(*input)
    loss = criterion(output[mask_train], target[mask_train])
    loss.backward()
    optimizer.step()
    loss_train, acc_train = graph_test(model, criterion, input, target, mask_train)
    loss_val, acc_val = graph_test(model, criterion, input, target, mask_val)
    return loss_train, acc_train, loss_val, acc_val


def graph_test(model, criterion, input, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*input)
        output, target = output[mask], target[mask]
        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


def test_gcn_main():
    _needs_cpu_default()
    torch.manual_seed(42)
    feats, edges, labels_np = _cora_like()
    features, labels, adj_mat = load_cora(feats, edges, labels_np)
    assert features.layout == torch.sparse_coo and adj_mat.layout == torch.sparse_coo
    # the preprocessing against NumPy: row-normalised features, D^-1/2 (A + I) D^-1/2
    s = feats.sum(1).astype(np.float64)
    f_want = feats / np.where(s == 0, np.inf, s)[:, None]
    np.testing.assert_allclose(features.to_dense().numpy(), f_want, rtol=1e-6)
    A = np.eye(30)
    A[edges[:, 0], edges[:, 1]] += 1
    d = A.sum(1) ** -0.5
    np.testing.assert_allclose(adj_mat.to_dense().numpy(), d[:, None] * A * d[None], rtol=1e-6)

    idx = torch.randperm(len(labels))
    idx_test, idx_val, idx_train = idx[:6], idx[6:12], idx[12:]
    gcn = GCN(features.shape[1], 16, labels.max().item() + 1, True, 0.5)
    optimizer = Adam(gcn.parameters(), lr=0.05, weight_decay=5e-4)
    criterion = nn.NLLLoss()
    first = graph_test(gcn, criterion, (features, adj_mat), labels, idx_train)
    for epoch in range(40):
        stats = train_iter(epoch + 1, gcn, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val)
    assert stats[0] < first[0] and stats[1] > 0.6, (first, stats)
    loss_test, acc_test = graph_test(gcn, criterion, (features, adj_mat), labels, idx_test)
    assert np.isfinite(loss_test) and 0 <= acc_test <= 1

    # GraphConv with a sparse adjacency equals the dense computation, gradients included (float64)
    gc = GraphConv(12, 4, use_bias=True).double()
    fd, ad = features.to_dense().double(), adj_mat.to_dense().double()
    out = gc(fd.to_sparse(), ad.to_sparse())
    np.testing.assert_allclose(out.detach().numpy(), ad.numpy() @ fd.numpy() @ gc.kernel.detach().numpy()
                               + gc.bias.detach().numpy(), rtol=1e-12)
    g, = torch.autograd.grad(out.pow(2).sum(), [gc.kernel])
    k = gc.kernel.detach().numpy()
    want = fd.numpy().T @ ad.numpy().T @ (2 * (ad.numpy() @ fd.numpy() @ k + gc.bias.detach().numpy()))
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-10)


class GraphAttentionLayer(nn.Module):
    def __init__(self, in_features, out_features, n_heads, concat=False, dropout=0.4, leaky_relu_slope=0.2):
        super(GraphAttentionLayer, self).__init__()
        self.n_heads = n_heads
        self.concat = concat
        self.dropout = dropout
        if concat:
            self.out_features = out_features
            assert out_features % n_heads == 0
            self.n_hidden = out_features // n_heads
        else:
            self.n_hidden = out_features
        # the example's torch.empty(size=(...)); see the report for size= in the factories
        self.W = nn.Parameter(torch.empty((in_features, self.n_hidden * n_heads)))
        self.a = nn.Parameter(torch.empty((n_heads, 2 * self.n_hidden, 1)))
        self.leakyrelu = nn.LeakyReLU(leaky_relu_slope)
        self.softmax = nn.Softmax(dim=1)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a)

    def _get_attention_scores(self, h_transformed):
        source_scores = torch.matmul(h_transformed, self.a[:, :self.n_hidden, :])
        target_scores = torch.matmul(h_transformed, self.a[:, self.n_hidden:, :])
        e = source_scores + target_scores.mT
        return self.leakyrelu(e)

    def forward(self, h, adj_mat):
        n_nodes = h.shape[0]
        h_transformed = torch.mm(h, self.W)
        h_transformed = F.dropout(h_transformed, self.dropout, training=self.training)
        h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)
        e = self._get_attention_scores(h_transformed)
        connectivity_mask = -9e16 * torch.ones_like(e)
        e = torch.where(adj_mat > 0, e, connectivity_mask)
        attention = F.softmax(e, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, h_transformed)
        if self.concat:
            h_prime = h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.out_features)
        else:
            h_prime = h_prime.mean(dim=0)
        return h_prime


class GAT(nn.Module):
    def __init__(self, in_features, n_hidden, n_heads, num_classes, concat=False, dropout=0.4,
                 leaky_relu_slope=0.2):
        super(GAT, self).__init__()
        self.gat1 = GraphAttentionLayer(in_features=in_features, out_features=n_hidden, n_heads=n_heads,
                                        concat=concat, dropout=dropout, leaky_relu_slope=leaky_relu_slope)
        self.gat2 = GraphAttentionLayer(in_features=n_hidden, out_features=num_classes, n_heads=1,
                                        concat=False, dropout=dropout, leaky_relu_slope=leaky_relu_slope)

    def forward(self, input_tensor, adj_mat):
        x = self.gat1(input_tensor, adj_mat)
        x = F.elu(x)
        x = self.gat2(x, adj_mat)
        return F.log_softmax(x, dim=1)


@pytest.mark.parametrize("concat", [False, True])
def test_gat_main(concat):
    _needs_cpu_default()
    torch.manual_seed(13)
    feats, edges, labels_np = _cora_like(seed=1)
    features, labels, adj_mat = load_cora(feats, edges, labels_np, normalize=False)
    assert adj_mat.layout == torch.strided and adj_mat.dtype == torch.float32  # eye + sparse int64
    idx = torch.randperm(len(labels))
    idx_test, idx_val, idx_train = idx[:6], idx[6:12], idx[12:]
    gat_net = GAT(in_features=features.shape[1], n_hidden=16, n_heads=4,
                  num_classes=labels.max().item() + 1, concat=concat, dropout=0.2, leaky_relu_slope=0.2)
    a = gat_net.gat1.a
    assert a.shape == (4, 2 * gat_net.gat1.n_hidden, 1)
    optimizer = Adam(gat_net.parameters(), lr=0.01, weight_decay=5e-4)
    criterion = nn.NLLLoss()
    first = graph_test(gat_net, criterion, (features, adj_mat), labels, idx_train)
    for epoch in range(25):
        stats = train_iter(epoch + 1, gat_net, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val)
    assert stats[0] < first[0], (first, stats)
    # attention only reaches neighbours: a node's output ignores a non-neighbour's features
    layer = gat_net.gat1.eval()
    i, j = next((i, j) for i in range(30) for j in range(30) if adj_mat[i, j] == 0 and i != j)
    x = features.clone().requires_grad_(True)
    g, = torch.autograd.grad(layer(x, adj_mat)[i].sum(), [x])
    assert torch.all(g[j] == 0) and g[i].abs().sum() > 0


# --------------------------------------------------------------------------- regression/main.py
def test_regression_main():
    torch.manual_seed(0)
    POLY_DEGREE = 4
    W_target = torch.randn(POLY_DEGREE, 1) * 5
    b_target = torch.randn(1) * 5

    def make_features(x):
        x = x.unsqueeze(1)
        return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)

    def f(x):
        return x.mm(W_target) + b_target.item()

    def poly_desc(W, b):
        result = 'y = '
        for i, w in enumerate(W):
            result += '{:+.2f} x^{} '.format(w, i + 1)
        result += '{:+.2f}'.format(b[0])
        return result

    def get_batch(batch_size=32):
        random = torch.randn(batch_size)
        x = make_features(random)
        y = f(x)
        return x, y

    fc = torch.nn.Linear(W_target.size(0), 1)
    losses = []
    for batch_idx in count(1):
        batch_x, batch_y = get_batch()
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        losses.append(loss)
        output.backward()
        for param in fc.parameters():
            param.data.add_(-0.1 * param.grad)
        if loss < 1e-3 or batch_idx == 3000:
            break
    assert loss < 1e-3, (batch_idx, losses[::300])
    msg = 'Loss: {:.6f} after {} batches'.format(loss, batch_idx)
    assert msg.startswith('Loss: 0.000')
    learned = poly_desc(fc.weight.view(-1), fc.bias)
    actual = poly_desc(W_target.view(-1), b_target)
    w, b = W_target.view(-1).tolist(), b_target.item()
    assert actual == 'y = ' + ''.join('{:+.2f} x^{} '.format(v, i + 1) for i, v in enumerate(w)) + '{:+.2f}'.format(b)
    np.testing.assert_allclose(fc.weight.view(-1).detach().numpy(), w, atol=0.1)
    assert learned.count('x^') == 4


# --------------------------------------------------------------------- reinforcement_learning
class CorridorEnv:
    """A tiny stand-in for CartPole: 4 observations; action 1 is right when ``obs[0] > 0``, action 0
    otherwise; a right action earns 1 and continues, a wrong one ends the episode (at most 50 steps)."""

    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)

    def reset(self, seed=None):
        self.t = 0
        self.state = self.rng.uniform(-1, 1, 4)
        return self.state, {}

    def step(self, action):
        right = int(self.state[0] > 0) == action
        self.t += 1
        self.state = self.rng.uniform(-1, 1, 4)
        done = (not right) or self.t >= 50
        return self.state, 1.0 if right else 0.0, done, False, {}


gamma = 0.99
eps = np.finfo(np.float32).eps.item()


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


def test_reinforce():
    _needs_cpu_default()
    torch.manual_seed(543)
    env = CorridorEnv(543)
    policy = Policy()
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)

    def select_action(state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = policy(state)
        m = Categorical(probs)
        action = m.sample()
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def finish_episode():
        R = 0
        policy_loss = []
        returns = deque()
        for r in policy.rewards[::-1]:
            R = r + gamma * R
            returns.appendleft(R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]

    running_reward = 10
    ep_rewards = []
    for i_episode in range(1, 121):
        state, _ = env.reset(seed=543)
        ep_reward = 0
        for t in range(1, 10000):
            action = select_action(state)
            assert action in (0, 1)
            state, reward, done, _, _ = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        ep_rewards.append(ep_reward)
        if len(policy.rewards) > 1:
            finish_episode()
        else:  # a one-step episode: std() of one return is nan (as in PyTorch); skip it
            del policy.rewards[:]
            del policy.saved_log_probs[:]
    assert np.mean(ep_rewards[-20:]) > 2 * np.mean(ep_rewards[:20]) + 1, ep_rewards
    assert torch.tensor(deque([1.0])).std().isnan().item()  # why one-step episodes are skipped


def test_std_of_one_element_warns():
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        assert torch.tensor([1.0]).std().isnan().item()


def test_spmm():
    """gcn's ``torch.spmm``: a dense product of a sparse (or dense) matrix and a dense one, with a
    gradient for the dense operand (float64 against NumPy)."""
    a = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]], dtype=torch.float64)
    d = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    out = spmm(a.to_sparse(), d)
    assert out.layout == torch.strided
    np.testing.assert_allclose(out.detach().numpy(), a.numpy() @ d.detach().numpy(), rtol=1e-12)
    g, = torch.autograd.grad((out ** 2).sum(), [d])
    np.testing.assert_allclose(g.numpy(), a.numpy().T @ (2 * a.numpy() @ d.detach().numpy()), rtol=1e-12)
    np.testing.assert_allclose(spmm(a, d).detach().numpy(), out.detach().numpy(), rtol=1e-12)
    torch_ = pytest.importorskip("torch")
    want = torch_.spmm(torch_.from_numpy(a.numpy()).to_sparse(), torch_.from_numpy(d.detach().numpy()))
    np.testing.assert_allclose(out.detach().numpy(), want.numpy(), rtol=1e-12)


def test_top_level_spmm():
    assert torch.spmm is _sparse_ops.spmm


SavedAction = namedtuple('SavedAction', ['log_prob', 'value'])


class ActorCriticPolicy(nn.Module):
    def __init__(self):
        super(ActorCriticPolicy, self).__init__()
        self.affine1 = nn.Linear(4, 128)
        self.action_head = nn.Linear(128, 2)
        self.value_head = nn.Linear(128, 1)
        self.saved_actions = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_prob = F.softmax(self.action_head(x), dim=-1)
        state_values = self.value_head(x)
        return action_prob, state_values


def test_actor_critic():
    _needs_cpu_default()
    torch.manual_seed(543)
    env = CorridorEnv(7)
    model = ActorCriticPolicy()
    optimizer = optim.Adam(model.parameters(), lr=3e-2)

    def select_action(state):
        state = torch.from_numpy(state).float()
        probs, state_value = model(state)
        m = Categorical(probs)
        action = m.sample()
        model.saved_actions.append(SavedAction(m.log_prob(action), state_value))
        return action.item()

    def finish_episode():
        R = 0
        saved_actions = model.saved_actions
        policy_losses = []
        value_losses = []
        returns = []
        for r in model.rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for (log_prob, value), R in zip(saved_actions, returns):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            value_losses.append(F.smooth_l1_loss(value, torch.tensor([R])))
        optimizer.zero_grad()
        loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
        loss.backward()
        optimizer.step()
        del model.rewards[:]
        del model.saved_actions[:]
        return loss

    ep_rewards = []
    for i_episode in range(1, 121):
        state, _ = env.reset()
        ep_reward = 0
        for t in range(1, 10000):
            action = select_action(state)
            state, reward, done, _, _ = env.step(action)
            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        ep_rewards.append(ep_reward)
        if len(model.rewards) > 1:
            loss = finish_episode()
            assert loss.shape == () and np.isfinite(loss.item())
        else:
            del model.rewards[:]
            del model.saved_actions[:]
    assert np.mean(ep_rewards[-20:]) > 2 * np.mean(ep_rewards[:20]) + 1, ep_rewards

    # Categorical's log_prob and entropy against closed forms; its score-function gradient
    p = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64, requires_grad=True)
    m = Categorical(p)
    np.testing.assert_allclose(m.log_prob(torch.tensor(1)).item(), np.log(0.5), rtol=1e-12)
    np.testing.assert_allclose(m.entropy().item(), -(np.array([.2, .5, .3]) * np.log([.2, .5, .3])).sum(), rtol=1e-12)
    g, = torch.autograd.grad(m.log_prob(torch.tensor(2)), [p])
    np.testing.assert_allclose(g.numpy(), [-1.0, -1.0, 1 / 0.3 - 1.0], rtol=1e-12)  # probs are renormalised
    torch.manual_seed(0)
    draws = Categorical(probs=torch.tensor([0.2, 0.5, 0.3])).sample((6000,))
    np.testing.assert_allclose(torch.bincount(draws).double().numpy() / 6000, [0.2, 0.5, 0.3], atol=0.03)
