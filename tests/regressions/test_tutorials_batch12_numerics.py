"""PyTorch tutorials, recipes and examples run on Lucid (``import lucid as torch``), twelfth batch,
numerics. Each program below is written once, against a module named ``torch``, and run with
``lucid`` and (where installed) with PyTorch, from the same NumPy-drawn weights, data and noise:

- pytorch/examples ``vae/main.py``: the ``VAE`` (``encode``/``reparameterize``/``decode``), its
  ``binary_cross_entropy(reduction='sum')`` + KL loss, ``Adam``, sampling through ``decode``
  (sizes shrunk; the reparameterization noise is passed in instead of ``randn_like``).
- A normalizing flow with ``torch.distributions``: ``TransformedDistribution`` over ``Normal`` with a
  learnable ``AffineTransform`` and a user ``Transform`` subclass (a leaky elementwise bijection with
  ``_call``/``_inverse``/``log_abs_det_jacobian``), wrapped in ``Independent`` and trained by
  maximum likelihood; ``ComposeTransform([Affine, Exp])`` against ``LogNormal``, its ``cdf``/``icdf``.
- Bayesian linear regression by hand-written SVI (no Pyro): ``Normal`` posterior with
  ``softplus`` scales, the reparameterized ELBO with ``kl_divergence``, ``entropy``.
- The linalg recipes: ``linalg.lstsq`` (and ``driver='gelsd'``: ``rank``, ``singular_values``)
  against ``pinv``, rank-k SVD image compression with the gradient through ``svd``, PCA by
  ``eigh`` of a covariance with the gradient through the eigenpairs, ``matrix_rank``.
- The Fourier neural operator layers (``SpectralConv1d``/``SpectralConv2d`` from neuraloperator's
  FNO scripts): complex parameters from ``torch.rand(..., dtype=torch.cdouble)``, ``fft.rfft``/
  ``rfft2``, complex ``einsum``, a slice assignment into complex zeros, ``irfft(n=)``/``irfft2(s=)``,
  trained with ``Adam`` in an ``FNO1d`` (``Linear``, ``Conv1d``, ``gelu``). It runs under
  ``set_default_dtype(float64)`` rather than ``.double()``: Lucid's ``Module.double()`` (and
  ``float()``/``half()``) casts complex parameters to real, where PyTorch casts floating ones only
  (left to ``lucid/nn``, outside this batch).
- A complex-valued ``nn.Linear(dtype=torch.cdouble)`` trained with ``SGD(momentum)`` on
  ``abs().pow(2)``, ``view_as_real`` and ``angle`` terms (PyTorch's conjugate-Wirtinger gradients).
- ``torch.special`` in a likelihood: probit regression with ``log_ndtr``, a negative-binomial term
  with ``gammaln``/``xlogy``/``expit``, fitted by ``LBFGS(closure)``; a dozen special functions.
- The per-sample-gradients recipe turned into DP-SGD: ``functional_call`` + ``vmap(grad(...),
  in_dims=(None, None, 0, 0))``, per-sample clipping and Gaussian noise; checked against a loop.
- functorch's ``examples/ensembling/parallel_train.py`` (model ensembling by training): the spirals,
  ``MLPClassifier``, ``train_step_fn`` through ``grad_and_value`` + ``functional_call`` with a
  hand-written SGD under ``no_grad``, ``stack_module_state`` and ``vmap(in_dims=(0, None, None))``;
  plus its step 7 "left as an exercise" (each model on its own random subset, ``in_dims=(0, 0, 0)``),
  checked against a loop over one model.
- The "Complex Numbers" note: ``view_as_complex``/``view_as_real``, an in-place write through
  ``.real``, ``abs``/``angle``, ``linalg.eigvals`` and ``matmul`` on complex, ``polar``,
  ``save``/``load``, the conjugate Wirtinger gradient, and ``AdamW`` on a complex parameter
  stepping exactly as on its ``view_as_real`` twin.
- The jacobians/hessians tutorial's remaining sections: ``hessian`` of a closure,
  ``jacfwd(jacrev(f, argnums=2), argnums=2)``, a batched hessian with ``vmap``, the ``hvp`` built
  from ``jvp(grad(f))``, ``jacrev(argnums=(0, 1))`` and ``linearize``.

Fixed on the way: ``func.jacrev``/``jacfwd`` (and so ``func.hessian``) took complex arguments and
outputs and gave answers in two conventions (``jacrev`` the conjugate of ``jacfwd``'s for a
holomorphic map; a real-to-complex map's Jacobian silently lost its imaginary part); they raise
PyTorch's RuntimeError now, for any complex positional argument (differentiated or not) or output
(not ``aux``), while ``autograd.functional.jacobian(vectorize=True)`` keeps taking complex as
PyTorch's does. ``linalg.lstsq``'s shape error showed a vector ``B`` after its internal
``unsqueeze(-1)`` (``B (5, 2, 1)`` for a given ``(5, 2)``); it names the shape passed in now.

Lucid matched PyTorch to ~1e-14 in float64 throughout (``special.polygamma(1, x)``: Lucid is the
closer one to the true value; PyTorch's CPU trigamma is off by ~1e-9).
"""
import numpy as np
import pytest

import lucid


def vae(torch, d):
    nn, F = torch.nn, torch.nn.functional
    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 8); self.fc21 = nn.Linear(8, 2); self.fc22 = nn.Linear(8, 2)
            self.fc3 = nn.Linear(2, 8); self.fc4 = nn.Linear(8, 12)
        def encode(self, x):
            h1 = F.relu(self.fc1(x)); return self.fc21(h1), self.fc22(h1)
        def reparameterize(self, mu, logvar):
            std = torch.exp(0.5 * logvar); eps = self.eps; return mu + eps * std
        def decode(self, z):
            h3 = F.relu(self.fc3(z)); return torch.sigmoid(self.fc4(h3))
        def forward(self, x):
            mu, logvar = self.encode(x.view(-1, 12)); z = self.reparameterize(mu, logvar)
            return self.decode(z), mu, logvar
    def loss_function(recon_x, x, mu, logvar):
        BCE = F.binary_cross_entropy(recon_x, x.view(-1, 12), reduction='sum')
        KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return BCE + KLD
    model = VAE().double()
    model.load_state_dict({k: torch.tensor(v) for k, v in d['sd'].items()})
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(4):
        data = torch.tensor(d['x'][step])
        model.eps = torch.tensor(d['eps'][step])
        opt.zero_grad()
        recon, mu, logvar = model(data)
        loss = loss_function(recon, data, mu, logvar)
        loss.backward(); opt.step(); losses.append(loss.item())
    with torch.no_grad():
        sample = model.decode(torch.tensor(d['z']))
    return dict(losses=np.array(losses), sample=sample.cpu().numpy(), w=model.fc1.weight.detach().cpu().numpy())


def vae_data():
    r = np.random.default_rng(0)
    shapes = {'fc1': (8, 12), 'fc21': (2, 8), 'fc22': (2, 8), 'fc3': (8, 2), 'fc4': (12, 8)}
    sd = {}
    for k, (o, i) in shapes.items():
        sd[k + '.weight'] = r.uniform(-1, 1, (o, i)) / np.sqrt(i); sd[k + '.bias'] = r.uniform(-1, 1, o) / np.sqrt(i)
    return dict(sd=sd, x=r.uniform(0, 1, (4, 5, 12)).round(), eps=r.standard_normal((4, 5, 2)),
                z=r.standard_normal((3, 2)))


def flow(torch, d):
    D = torch.distributions
    class Planar(D.Transform):  # invertible leaky elementwise map
        domain = D.constraints.real; codomain = D.constraints.real; bijective = True
        def __init__(self, a):
            super().__init__(cache_size=0); self.a = a
        def _call(self, x): return torch.where(x >= 0, x, x * self.a)
        def _inverse(self, y): return torch.where(y >= 0, y, y / self.a)
        def log_abs_det_jacobian(self, x, y):
            return torch.where(x >= 0, torch.zeros_like(x), torch.log(self.a).expand_as(x))
    loc = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    log_scale = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(0.5, dtype=torch.float64)
    base = D.Normal(torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64))
    opt = torch.optim.Adam([loc, log_scale], lr=0.1)
    x = torch.tensor(d['x'])
    losses = []
    for step in range(5):
        flowd = D.TransformedDistribution(base, [D.AffineTransform(loc, log_scale.exp()), Planar(a)])
        flowd = D.Independent(flowd, 1)
        loss = -flowd.log_prob(x).mean()
        opt.zero_grad(); loss.backward(); opt.step(); losses.append(loss.item())
    ln = D.TransformedDistribution(
        base, D.ComposeTransform([D.AffineTransform(loc.detach(), log_scale.detach().exp()), D.ExpTransform()]))
    y = torch.tensor(d['y'])
    lp = ln.log_prob(y); ref = D.LogNormal(loc.detach(), log_scale.detach().exp()).log_prob(y)
    cdf = ln.cdf(y)
    return dict(losses=np.array(losses), lp=lp.cpu().numpy(), ref=ref.cpu().numpy(), cdf=cdf.cpu().numpy(),
                loc=loc.detach().cpu().numpy(), icdf=ln.icdf(torch.tensor(d['q'])).cpu().numpy())


def flow_data():
    r = np.random.default_rng(1)
    return dict(x=r.standard_normal((20, 2)) * 2 + 1, y=r.uniform(0.1, 3, (6, 2)), q=r.uniform(0.1, 0.9, (6, 2)))


def bayes(torch, d):
    D = torch.distributions; F = torch.nn.functional
    X = torch.tensor(d['X']); y = torch.tensor(d['y'])
    mu = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    rho = torch.full((3,), -1.0, dtype=torch.float64, requires_grad=True)
    prior = D.Normal(torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    opt = torch.optim.Adam([mu, rho], lr=0.1)
    elbos = []
    for step in range(30):
        q = D.Normal(mu, F.softplus(rho))
        w = mu + F.softplus(rho) * torch.tensor(d['eps'][step])
        lik = D.Normal(X @ w, 0.5).log_prob(y).sum()
        kl = D.kl_divergence(q, prior).sum()
        elbo = lik - kl
        opt.zero_grad(); (-elbo).backward(); opt.step(); elbos.append(elbo.item())
    return dict(elbos=np.array(elbos), mu=mu.detach().cpu().numpy(), rho=rho.detach().cpu().numpy(), kl=kl.item(),
                ent=q.entropy().detach().cpu().numpy())


def bayes_data():
    r = np.random.default_rng(2)
    X = r.standard_normal((30, 3)); w = np.array([1.0, -2.0, 0.5])
    return dict(X=X, y=X @ w + 0.5 * r.standard_normal(30), eps=r.standard_normal((30, 3)))


def linalg(torch, d):
    A = torch.tensor(d['A']); B = torch.tensor(d['B'])
    sol = torch.linalg.lstsq(A, B).solution
    pinv_sol = torch.linalg.pinv(A) @ B
    img = torch.tensor(d['img'], requires_grad=True)
    U, S, Vh = torch.linalg.svd(img, full_matrices=False)
    k = 3
    approx = U[:, :k] @ torch.diag(S[:k]) @ Vh[:k, :]
    err = torch.linalg.norm(img - approx)
    err.backward()
    g_svd = img.grad.clone()
    C = torch.tensor(d['C'], requires_grad=True)
    cov = C.T @ C / (C.shape[0] - 1)
    evals, evecs = torch.linalg.eigh(cov)
    proj = C @ evecs[:, -2:]
    (evals[-1] + (proj ** 2).sum()).backward()
    res = torch.linalg.lstsq(A, B, driver='gelsd')
    return dict(sol=sol.cpu().numpy(), pinv=pinv_sol.cpu().numpy(), err=err.item(), S=S.detach().cpu().numpy(),
                g_svd=g_svd.cpu().numpy(), evals=evals.detach().cpu().numpy(), gC=C.grad.cpu().numpy(),
                rank=int(res.rank), sv=res.singular_values.cpu().numpy(),
                approx_rank=int(torch.linalg.matrix_rank(approx.detach())))


def linalg_data():
    r = np.random.default_rng(3)
    return dict(A=r.standard_normal((8, 3)), B=r.standard_normal((8, 2)), img=r.uniform(0, 1, (7, 6)),
                C=r.standard_normal((10, 4)))


def fno(torch, d):
    nn, F = torch.nn, torch.nn.functional
    class SpectralConv1d(nn.Module):
        def __init__(self, in_channels, out_channels, modes1):
            super().__init__()
            self.in_channels = in_channels; self.out_channels = out_channels; self.modes1 = modes1
            self.scale = (1 / (in_channels * out_channels))
            self.weights1 = nn.Parameter(self.scale * torch.rand(in_channels, out_channels, self.modes1, dtype=torch.cdouble))
        def compl_mul1d(self, input, weights):
            return torch.einsum("bix,iox->box", input, weights)
        def forward(self, x):
            batchsize = x.shape[0]
            x_ft = torch.fft.rfft(x)
            out_ft = torch.zeros(batchsize, self.out_channels, x.size(-1) // 2 + 1, device=x.device, dtype=torch.cdouble)
            out_ft[:, :, :self.modes1] = self.compl_mul1d(x_ft[:, :, :self.modes1], self.weights1)
            x = torch.fft.irfft(out_ft, n=x.size(-1))
            return x
    class SpectralConv2d(nn.Module):
        def __init__(self, in_channels, out_channels, modes1, modes2):
            super().__init__()
            self.out_channels = out_channels; self.modes1 = modes1; self.modes2 = modes2
            scale = 1 / (in_channels * out_channels)
            self.weights1 = nn.Parameter(scale * torch.rand(in_channels, out_channels, modes1, modes2, dtype=torch.cdouble))
            self.weights2 = nn.Parameter(scale * torch.rand(in_channels, out_channels, modes1, modes2, dtype=torch.cdouble))
        def compl_mul2d(self, input, weights):
            return torch.einsum("bixy,ioxy->boxy", input, weights)
        def forward(self, x):
            batchsize = x.shape[0]
            x_ft = torch.fft.rfft2(x)
            out_ft = torch.zeros(batchsize, self.out_channels, x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cdouble, device=x.device)
            out_ft[:, :, :self.modes1, :self.modes2] = self.compl_mul2d(x_ft[:, :, :self.modes1, :self.modes2], self.weights1)
            out_ft[:, :, -self.modes1:, :self.modes2] = self.compl_mul2d(x_ft[:, :, -self.modes1:, :self.modes2], self.weights2)
            return torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))
    class FNO1d(nn.Module):
        def __init__(self, modes, width):
            super().__init__()
            self.fc0 = nn.Linear(2, width)
            self.conv0 = SpectralConv1d(width, width, modes)
            self.w0 = nn.Conv1d(width, width, 1)
            self.fc1 = nn.Linear(width, 1)
        def forward(self, x):
            x = self.fc0(x).permute(0, 2, 1)
            x = F.gelu(self.conv0(x) + self.w0(x))
            return self.fc1(x.permute(0, 2, 1))
    m = FNO1d(3, 4)
    m.load_state_dict({k: torch.tensor(v) for k, v in d['sd1'].items()})
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    x = torch.tensor(d['x']); y = torch.tensor(d['y'])
    losses = []
    for step in range(4):
        opt.zero_grad(); loss = F.mse_loss(m(x), y); loss.backward(); opt.step(); losses.append(loss.item())
    c2 = SpectralConv2d(2, 3, 2, 2)
    c2.load_state_dict({k: torch.tensor(v) for k, v in d['sd2'].items()})
    x2 = torch.tensor(d['x2'])
    out2 = c2(x2); (out2 ** 2).sum().backward()
    return dict(losses=np.array(losses), w=m.conv0.weights1.detach().cpu().numpy(), out2=out2.detach().cpu().numpy(),
                g2=c2.weights2.grad.cpu().numpy())


def fno_data():
    r = np.random.default_rng(4)
    W = 4
    c = lambda *s: r.uniform(0, 1, s) / 16 + 1j * r.uniform(0, 1, s) / 16
    sd1 = {'fc0.weight': r.standard_normal((W, 2)) * .5, 'fc0.bias': r.standard_normal(W) * .1,
           'conv0.weights1': c(W, W, 3), 'w0.weight': r.standard_normal((W, W, 1)) * .5, 'w0.bias': r.standard_normal(W) * .1,
           'fc1.weight': r.standard_normal((1, W)) * .5, 'fc1.bias': r.standard_normal(1) * .1}
    return dict(sd1=sd1, x=r.standard_normal((3, 8, 2)), y=r.standard_normal((3, 8, 1)),
                sd2={'weights1': c(2, 3, 2, 2) * 6, 'weights2': c(2, 3, 2, 2) * 6}, x2=r.standard_normal((2, 2, 6, 6)))


def cplx(torch, d):
    nn = torch.nn
    lin = nn.Linear(3, 2, dtype=torch.cdouble)
    lin.load_state_dict({k: torch.tensor(v) for k, v in d['sd'].items()})
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    x = torch.tensor(d['x']); y = torch.tensor(d['y'])
    losses = []
    for step in range(4):
        opt.zero_grad()
        out = lin(x)
        loss = (out - y).abs().pow(2).mean() + torch.view_as_real(out).sum() * 1e-2 + out.angle().mean() * 1e-2
        loss.backward(); opt.step(); losses.append(loss.item())
    z = torch.tensor(d['x'][0], requires_grad=True)
    torch.nn.functional.relu(z.real).sum().backward()  # complex autograd: grad of real part
    return dict(losses=np.array(losses), w=lin.weight.detach().cpu().numpy(), gz=z.grad.cpu().numpy())


def cplx_data():
    r = np.random.default_rng(5)
    cz = lambda *s: r.standard_normal(s) + 1j * r.standard_normal(s)
    return dict(sd={'weight': cz(2, 3) * .3, 'bias': cz(2) * .1}, x=cz(5, 3), y=cz(5, 2))


def probit(torch, d):
    sp = torch.special
    X = torch.tensor(d['X']); y = torch.tensor(d['y']); counts = torch.tensor(d['k'])
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    log_r = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, log_r], lr=0.5, max_iter=5)
    hist = []
    def closure():
        opt.zero_grad()
        eta = X @ w
        nll = -(y * sp.log_ndtr(eta) + (1 - y) * sp.log_ndtr(-eta)).sum()
        r = log_r.exp(); p = sp.expit(eta)
        # negative-binomial log-likelihood with gammaln / xlogy / xlog1py
        nb = (torch.lgamma(counts + r) - sp.gammaln(r) - torch.lgamma(counts + 1) + sp.xlogy(counts, p)
              + r * torch.log1p(-p)).sum()
        loss = nll - nb
        loss.backward(); hist.append(loss.item())
        return loss
    for _ in range(3):
        opt.step(closure)
    t = torch.tensor(d['t'])
    misc = torch.stack([sp.erfinv(t * 0.9), sp.ndtri(t), sp.digamma(t + 1), sp.i0e(t * 3), sp.i1e(t),
                        sp.entr(t), sp.erfcx(t), sp.sinc(t), sp.polygamma(1, t + 1),
                        sp.zeta(t + 2, torch.ones_like(t)), sp.multigammaln(t + 2, 2), sp.xlog1py(t, t)])
    return dict(hist=np.array(hist), w=w.detach().cpu().numpy(), misc=misc.cpu().numpy())


def probit_data():
    r = np.random.default_rng(6)
    X = r.standard_normal((25, 3))
    return dict(X=X, y=(X @ np.array([1., -1, .5]) + r.standard_normal(25) > 0).astype(float),
                k=r.poisson(3, 25).astype(float), t=r.uniform(0.05, 0.95, 5))


def dpsgd(torch, d):
    nn, F = torch.nn, torch.nn.functional
    from_func = __import__(torch.__name__ + '.func', fromlist=['x'])
    functional_call, vmap, grad = from_func.functional_call, from_func.vmap, from_func.grad
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    model.load_state_dict({k: torch.tensor(v) for k, v in d['sd'].items()})
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    def compute_loss(params, buffers, sample, target):
        batch = sample.unsqueeze(0); targets = target.unsqueeze(0)
        predictions = functional_call(model, (params, buffers), (batch,))
        return F.cross_entropy(predictions, targets)
    ft_compute_grad = grad(compute_loss)
    ft_compute_sample_grad = vmap(ft_compute_grad, in_dims=(None, None, 0, 0))
    x = torch.tensor(d['x']); t = torch.tensor(d['t'])
    C, sigma, lr = 1.0, 0.5, 0.1
    for step in range(3):
        g = ft_compute_sample_grad(params, buffers, x, t)
        norms = torch.stack([gi.flatten(1).norm(dim=1) for gi in g.values()], 1).norm(dim=1)
        factor = (C / (norms + 1e-6)).clamp(max=1.0)
        noise = d['noise'][step]
        params = {k: p - lr * ((gi * factor.view(-1, *[1] * (gi.dim() - 1))).sum(0)
                               + sigma * C * torch.tensor(noise[k])) / x.shape[0]
                  for (k, p), gi in zip(params.items(), g.values())}
    # loop reference for the last step's per-sample grads
    ref = []
    for i in range(x.shape[0]):
        p = {k: v.clone().requires_grad_() for k, v in params.items()}
        l = compute_loss(p, buffers, x[i], t[i]); ref.append(torch.autograd.grad(l, list(p.values()))[0])
    g = ft_compute_sample_grad(params, buffers, x, t)
    return dict(p={k: v.cpu().numpy() for k, v in params.items()}, norms=norms.cpu().numpy(),
                g0=list(g.values())[0].cpu().numpy(), ref0=torch.stack(ref).cpu().numpy())


def dpsgd_data():
    r = np.random.default_rng(7)
    sd = {'0.weight': r.standard_normal((6, 4)) * .5, '0.bias': r.standard_normal(6) * .1,
          '2.weight': r.standard_normal((3, 6)) * .5, '2.bias': r.standard_normal(3) * .1}
    return dict(sd=sd, x=r.standard_normal((5, 4)), t=r.integers(0, 3, 5),
                noise=[{k: r.standard_normal(v.shape) for k, v in sd.items()} for _ in range(3)])


def hess(torch, d):
    fn = __import__(torch.__name__ + '.func', fromlist=['x'])
    F = torch.nn.functional
    w = torch.tensor(d['w']); b = torch.tensor(d['b']); x = torch.tensor(d['x'])
    def predict(weight, bias, x): return F.linear(x, weight, bias).tanh()
    h_w = fn.hessian(lambda w_: predict(w_, b, x[0]).sum())(w)
    hfr = fn.jacfwd(fn.jacrev(predict, argnums=2), argnums=2)(w, b, x[0])
    batch_h = fn.vmap(fn.hessian(predict, argnums=2), in_dims=(None, None, 0))(w, b, x)
    def hvp(f, primals, tangents): return fn.jvp(fn.grad(f), primals, tangents)[1]
    f = lambda x_: torch.sin(x_).sum() * x_.pow(2).sum()
    v = torch.tensor(d['v'])
    hv = hvp(f, (x[0],), (v,))
    hv2 = fn.hessian(f)(x[0]) @ v
    jw, jb = fn.jacrev(predict, argnums=(0, 1))(w, b, x[0])
    lin_out, jvp_fn = fn.linearize(lambda x_: predict(w, b, x_), x[0])
    return dict(h_w=h_w.cpu().numpy(), hfr=hfr.cpu().numpy(), batch_h=batch_h.cpu().numpy(), hv=hv.cpu().numpy(),
                hv2=hv2.cpu().numpy(), jw=jw.cpu().numpy(), jb=jb.cpu().numpy(), lin=jvp_fn(v).cpu().numpy())


def hess_data():
    r = np.random.default_rng(8)
    return dict(w=r.standard_normal((3, 4)), b=r.standard_normal(3), x=r.standard_normal((2, 4)),
                v=r.standard_normal(4))


def complex_note(torch, d, tmp_path):
    """docs/source/notes/complex_numbers.rst, with NumPy-drawn values instead of ``randn``."""
    x = torch.tensor(d["x"]).to(torch.cfloat)
    y = torch.tensor(d["y"])  # float32 (3, 2)
    z = torch.view_as_complex(y)
    back = torch.view_as_real(z)
    x.real.mul_(2)  # in place through the real view
    parts = torch.stack([x.abs(), x.angle(), x.real, x.imag])
    m = torch.tensor(d["m"]).to(torch.cdouble)
    eigvals = torch.linalg.eigvals(m)
    prod = torch.matmul(m, m)
    p = torch.polar(torch.tensor(d["r"]), torch.tensor(d["th"]))
    torch.save(z, tmp_path / "complex_tensor.pt")
    loaded = torch.load(tmp_path / "complex_tensor.pt")
    # autograd: the conjugate Wirtinger derivative
    w = torch.tensor(d["m"][0]).to(torch.cdouble).requires_grad_()
    loss = (w * w.conj()).real.sum() + (w ** 2).imag.sum()
    loss.backward()
    # "Optimizers": a complex parameter steps as its view_as_real twin
    params = [torch.tensor(a).to(torch.complex128) for a in d["params"]]
    real_params = [torch.view_as_real(q).clone() for q in params]
    params = [q.clone() for q in params]
    complex_optim = torch.optim.AdamW(params)
    real_optim = torch.optim.AdamW(real_params)
    for step in range(3):
        for q in params:
            q.grad = torch.tensor(d["grads"][step]).to(torch.complex128)
        for q in real_params:
            q.grad = torch.view_as_real(torch.tensor(d["grads"][step]).to(torch.complex128)).clone()
        complex_optim.step(); real_optim.step()
    return dict(z=z.cpu().numpy(), back=back.cpu().numpy(), parts=parts.cpu().numpy(),
                eig=torch.sort(eigvals.real).values.cpu().numpy(), prod=prod.cpu().numpy(), polar=p.cpu().numpy(),
                loaded=loaded.cpu().numpy(), gw=w.grad.cpu().numpy(),
                cparams=torch.stack([torch.view_as_real(q.detach()) for q in params]).cpu().numpy(),
                rparams=torch.stack([q.detach() for q in real_params]).cpu().numpy())


def complex_note_data():
    r = np.random.default_rng(9)
    c = lambda *s: (r.standard_normal(s) + 1j * r.standard_normal(s))
    return dict(x=c(2, 2), y=r.standard_normal((3, 2)).astype(np.float32), m=c(3, 3), r=r.uniform(0.5, 2, 4),
                th=r.uniform(-3, 3, 4), params=[c(2, 3) for _ in range(2)], grads=[c(2, 3) for _ in range(3)])


def parallel_train(torch, d):
    """functorch's examples/ensembling/parallel_train.py (sizes shrunk, random draws from NumPy)."""
    import math
    nn, F = torch.nn, torch.nn.functional
    func = __import__(torch.__name__ + ".func", fromlist=["vmap"])
    functional_call, grad_and_value, vmap, stack_module_state = (
        func.functional_call, func.grad_and_value, func.vmap, func.stack_module_state)

    def make_spirals(n_samples, noise_std=0., rotations=1.):
        ts = torch.linspace(0, 1, n_samples, dtype=torch.float64)
        rs = ts ** 0.5
        thetas = rs * rotations * 2 * math.pi
        signs = torch.tensor(d["signs"]) * 2 - 1
        labels = (signs > 0).to(torch.long)
        xs = rs * signs * torch.cos(thetas) + torch.tensor(d["nx"]) * noise_std
        ys = rs * signs * torch.sin(thetas) + torch.tensor(d["ny"]) * noise_std
        points = torch.stack([xs, ys], dim=1)
        return points, labels

    points, labels = make_spirals(24, noise_std=0.05)

    class MLPClassifier(nn.Module):
        def __init__(self, hidden_dim=8, n_classes=2):
            super().__init__()
            self.hidden_dim = hidden_dim
            self.n_classes = n_classes
            self.fc1 = nn.Linear(2, self.hidden_dim)
            self.fc2 = nn.Linear(self.hidden_dim, self.n_classes)

        def forward(self, x):
            x = self.fc1(x)
            x = F.relu(x)
            x = self.fc2(x)
            x = F.log_softmax(x, -1)
            return x

    def new_model(i):
        m = MLPClassifier().double()
        m.load_state_dict({k: torch.tensor(v) for k, v in d["sds"][i].items()})
        return m

    loss_fn = nn.NLLLoss()
    model = new_model(0)

    def train_step_fn(weights, batch, targets, lr=0.2):
        def compute_loss(weights, batch, targets):
            output = functional_call(model, weights, batch)
            loss = loss_fn(output, targets)
            return loss

        grad_weights, loss = grad_and_value(compute_loss)(weights, batch, targets)
        new_weights = {}
        with torch.no_grad():
            for key in grad_weights:
                new_weights[key] = weights[key] - grad_weights[key] * lr
        return loss, new_weights

    step4 = []
    weights = dict(model.named_parameters())
    for i in range(5):
        loss, weights = train_step_fn(weights, points, labels)
        step4.append(loss.item())

    def init_fn(num_models):
        models = [new_model(i) for i in range(num_models)]
        params, _ = stack_module_state(models)
        return params

    parallel_train_step_fn = vmap(train_step_fn, in_dims=(0, None, None))
    batched_weights = init_fn(num_models=2)
    step6 = []
    for i in range(5):
        loss, batched_weights = parallel_train_step_fn(batched_weights, points, labels)
        step6.append(loss.detach().cpu().numpy())
    # step 7, "left as an exercise": each model trains on its own random subset
    subsets = torch.tensor(d["subsets"])
    step7_fn = vmap(train_step_fn, in_dims=(0, 0, 0))
    w7 = init_fn(num_models=2)
    step7 = []
    for i in range(5):
        loss, w7 = step7_fn(w7, points[subsets[i]], labels[subsets[i]])
        step7.append(loss.detach().cpu().numpy())
    # the loop the vmapped step stands for: model 1 alone on its own subsets
    w1 = {k: v[1] for k, v in init_fn(num_models=2).items()}
    loop1 = []
    for i in range(5):
        loss, w1 = train_step_fn(w1, points[subsets[i, 1]], labels[subsets[i, 1]])
        loop1.append(loss.item())
    return dict(points=points.cpu().numpy(), step4=np.array(step4), step6=np.array(step6), step7=np.array(step7),
                loop1=np.array(loop1), w7=w7["fc2.weight"].detach().cpu().numpy(),
                w1=w1["fc2.weight"].detach().cpu().numpy())


def parallel_train_data():
    r = np.random.default_rng(10)
    sds = [{"fc1.weight": r.uniform(-0.7, 0.7, (8, 2)), "fc1.bias": r.uniform(-0.7, 0.7, 8),
            "fc2.weight": r.uniform(-0.35, 0.35, (2, 8)), "fc2.bias": r.uniform(-0.35, 0.35, 2)} for _ in range(2)]
    return dict(signs=r.integers(0, 2, 24), nx=r.standard_normal(24), ny=r.standard_normal(24), sds=sds,
                subsets=np.stack([np.stack([r.choice(24, 16, replace=False) for _ in range(2)]) for _ in range(5)]))


@pytest.fixture
def float64_default():
    old = lucid.get_default_dtype()
    lucid.set_default_dtype(lucid.float64)
    try:
        yield
    finally:
        lucid.set_default_dtype(old)


def _parity(prog, data, default64=False):
    torch = pytest.importorskip("torch")
    old = torch.get_default_dtype()
    if default64:
        torch.set_default_dtype(torch.float64)
    try:
        ref = prog(torch, data)
    finally:
        torch.set_default_dtype(old)
    got = prog(lucid, data)
    return got, ref


def _close(got, ref, atol=1e-10, path=""):
    if isinstance(got, dict):
        assert set(got) == set(ref), path
        for k in got:
            _close(got[k], ref[k], atol, path + "/" + k)
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-9, atol=atol, err_msg=path)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_vae():
    d = vae_data()
    out = vae(lucid, d)
    sd, x, eps = d["sd"], d["x"][0], d["eps"][0]
    lin = lambda h, k: h @ sd[k + ".weight"].T + sd[k + ".bias"]
    h1 = np.maximum(lin(x, "fc1"), 0)
    mu, logvar = lin(h1, "fc21"), lin(h1, "fc22")
    z = mu + eps * np.exp(0.5 * logvar)
    recon = _sigmoid(lin(np.maximum(lin(z, "fc3"), 0), "fc4"))
    bce = -(x * np.log(recon) + (1 - x) * np.log(1 - recon)).sum()
    kld = -0.5 * (1 + logvar - mu ** 2 - np.exp(logvar)).sum()
    np.testing.assert_allclose(out["losses"][0], bce + kld, rtol=1e-12)
    assert out["sample"].shape == (3, 12) and ((out["sample"] > 0) & (out["sample"] < 1)).all()


def test_vae_torch_parity():
    _close(*_parity(vae, vae_data()))


def test_normalizing_flow():
    out = flow(lucid, flow_data())
    assert out["losses"][-1] < out["losses"][0]
    np.testing.assert_allclose(out["lp"], out["ref"], rtol=1e-12)
    loc = out["loc"]
    assert (np.abs(loc) > 0.3).all()  # five Adam steps of 0.1 moved towards the data's mean of 1
    d = flow_data()
    np.testing.assert_allclose(lucid_icdf_cdf(d), d["y"], rtol=1e-10)


def lucid_icdf_cdf(d):
    D = lucid.distributions
    ln = D.TransformedDistribution(D.Normal(lucid.zeros(2, dtype=lucid.float64), lucid.ones(2, dtype=lucid.float64)),
                                   D.ComposeTransform([D.AffineTransform(0.5, 2.0), D.ExpTransform()]))
    y = lucid.tensor(d["y"])
    return ln.icdf(ln.cdf(y)).cpu().numpy()


def test_normalizing_flow_torch_parity():
    _close(*_parity(flow, flow_data()))


def test_bayesian_regression_svi():
    out = bayes(lucid, bayes_data())
    assert out["elbos"][-5:].mean() > out["elbos"][:5].mean() + 100
    np.testing.assert_allclose(out["mu"], [1.0, -2.0, 0.5], atol=0.5)  # near the true weights


def test_bayesian_regression_svi_torch_parity():
    _close(*_parity(bayes, bayes_data()))


def test_linalg_recipes():
    d = linalg_data()
    out = linalg(lucid, d)
    np.testing.assert_allclose(out["sol"], np.linalg.lstsq(d["A"], d["B"], rcond=None)[0], atol=1e-12)
    np.testing.assert_allclose(out["pinv"], out["sol"], atol=1e-12)
    S = np.linalg.svd(d["img"], compute_uv=False)
    np.testing.assert_allclose(out["err"], np.sqrt((S[3:] ** 2).sum()), rtol=1e-12)  # Eckart-Young
    U, s, Vh = np.linalg.svd(d["img"], full_matrices=False)
    resid = d["img"] - (U[:, :3] * s[:3]) @ Vh[:3]
    np.testing.assert_allclose(out["g_svd"], resid / np.linalg.norm(resid), atol=1e-12)
    assert out["approx_rank"] == 3 and out["rank"] == 3
    C = d["C"]
    np.testing.assert_allclose(out["evals"], np.linalg.eigvalsh(C.T @ C / 9), atol=1e-12)


def test_linalg_recipes_torch_parity():
    _close(*_parity(linalg, linalg_data()))


def test_fno_spectral_conv(float64_default):
    d = fno_data()
    out = fno(lucid, d)
    assert out["losses"][-1] < out["losses"][0]
    w1, w2, x = d["sd2"]["weights1"], d["sd2"]["weights2"], d["x2"]
    xf = np.fft.rfft2(x)
    of = np.zeros((2, 3, 6, 4), complex)
    of[:, :, :2, :2] = np.einsum("bixy,ioxy->boxy", xf[:, :, :2, :2], w1)
    of[:, :, -2:, :2] = np.einsum("bixy,ioxy->boxy", xf[:, :, -2:, :2], w2)
    np.testing.assert_allclose(out["out2"], np.fft.irfft2(of, s=(6, 6)), atol=1e-12)


def test_fno_spectral_conv_torch_parity(float64_default):
    _close(*_parity(fno, fno_data(), default64=True))


def test_complex_linear():
    d = cplx_data()
    out = cplx(lucid, d)
    assert out["losses"][-1] < out["losses"][0]
    np.testing.assert_array_equal(out["gz"], (d["x"][0].real > 0).astype(complex))


def test_complex_linear_torch_parity():
    _close(*_parity(cplx, cplx_data()))


def test_special_likelihoods():
    d = probit_data()
    out = probit(lucid, d)
    assert out["hist"][-1] < out["hist"][0]
    t = d["t"]
    m = out["misc"]
    np.testing.assert_allclose(m[5], -t * np.log(t), rtol=1e-12)  # entr
    np.testing.assert_allclose(m[7], np.sinc(t), rtol=1e-12)
    np.testing.assert_allclose(m[3], np.i0(3 * t) * np.exp(-3 * t), rtol=1e-12)
    np.testing.assert_allclose(m[11], t * np.log1p(t), rtol=1e-12)
    s, n = t + 2, 1000.0  # zeta(s, 1) by a partial sum plus its Euler-Maclaurin tail
    k = np.arange(1, 1000.0)[:, None]
    zeta = (k ** -s).sum(0) + n ** (1 - s) / (s - 1) + n ** -s / 2 + s * n ** (-s - 1) / 12
    np.testing.assert_allclose(m[9], zeta, rtol=1e-10)


def test_special_likelihoods_torch_parity():
    got, ref = _parity(probit, probit_data())
    _close(got["hist"], ref["hist"]), _close(got["w"], ref["w"])
    _close(got["misc"], ref["misc"], atol=2e-9)  # PyTorch's CPU trigamma is ~1e-9 off; Lucid's is not


def test_dp_sgd_per_sample_grads():
    out = dpsgd(lucid, dpsgd_data())
    np.testing.assert_allclose(out["g0"], out["ref0"], atol=1e-13)
    assert out["norms"].shape == (5,) and (out["norms"] > 0).all()


def test_dp_sgd_per_sample_grads_torch_parity():
    _close(*_parity(dpsgd, dpsgd_data()))


def test_jacobians_hessians_more():
    out = hess(lucid, hess_data())
    np.testing.assert_allclose(out["hv"], out["hv2"], atol=1e-12)
    np.testing.assert_allclose(out["batch_h"][0], out["hfr"], atol=1e-12)
    h = out["h_w"].reshape(12, 12)
    np.testing.assert_allclose(h, h.T, atol=1e-12)
    d = hess_data()
    pre = d["w"] @ d["x"][0] + d["b"]
    np.testing.assert_allclose(out["jb"], np.diag(1 - np.tanh(pre) ** 2), atol=1e-12)
    np.testing.assert_allclose(out["lin"], (1 - np.tanh(pre) ** 2) * (d["w"] @ d["v"]), atol=1e-12)


def test_jacobians_hessians_more_torch_parity():
    _close(*_parity(hess, hess_data()))


def test_complex_numbers_note(tmp_path):
    d = complex_note_data()
    out = complex_note(lucid, d, tmp_path)
    np.testing.assert_array_equal(out["back"], d["y"])
    np.testing.assert_array_equal(out["loaded"], out["z"])
    x = d["x"].astype(np.complex64) + d["x"].real.astype(np.complex64)  # the real part doubled in place
    np.testing.assert_allclose(out["parts"][0], np.abs(x), rtol=1e-6)
    np.testing.assert_allclose(out["parts"][1], np.angle(x), rtol=1e-6)
    np.testing.assert_allclose(out["polar"], d["r"] * np.exp(1j * d["th"]), rtol=1e-14)
    np.testing.assert_allclose(out["eig"], np.sort(np.linalg.eigvals(d["m"]).real), atol=1e-12)
    a, b = d["m"][0].real, d["m"][0].imag  # loss = |w|^2 + Im(w^2) = a^2 + b^2 + 2ab
    np.testing.assert_allclose(out["gw"], (2 * a + 2 * b) * (1 + 1j), atol=1e-14)
    np.testing.assert_array_equal(out["cparams"], out["rparams"])


def test_complex_numbers_note_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    d = complex_note_data()
    (tmp_path / "t").mkdir(), (tmp_path / "l").mkdir()
    ref = complex_note(torch, d, tmp_path / "t")
    got = complex_note(lucid, d, tmp_path / "l")
    parts_got, parts_ref = got.pop("parts"), ref.pop("parts")
    np.testing.assert_allclose(parts_got, parts_ref, atol=1e-6)  # complex64
    _close(got, ref, atol=1e-6)


def test_lstsq_shape_error_names_the_given_b():
    A = lucid.ones(2, 5, 3, dtype=lucid.float64)
    with pytest.raises(RuntimeError, match=r"lstsq: incompatible shapes of A \(2, 5, 3\) and B \(5, 2\)$"):
        lucid.linalg.lstsq(A, lucid.ones(5, 2, dtype=lucid.float64))
    with pytest.raises(RuntimeError, match=r"and B \(2, 4, 2\)$"):
        lucid.linalg.lstsq(A, lucid.ones(2, 4, 2, dtype=lucid.float64))
    x = lucid.linalg.lstsq(A[0] + lucid.eye(5, 3, dtype=lucid.float64), lucid.ones(5, dtype=lucid.float64)[:, None])
    assert tuple(x.solution.shape) == (3, 1)


def test_parallel_train_ensembling():
    out = parallel_train(lucid, parallel_train_data())
    assert (np.diff(out["step4"]) < 0).all() and (np.diff(out["step6"], axis=0) < 0).all()
    np.testing.assert_allclose(out["step6"][:, 0], out["step4"], rtol=1e-13)  # model 0 is step 4's model
    np.testing.assert_allclose(out["step7"][:, 1], out["loop1"], rtol=1e-13)
    np.testing.assert_allclose(out["w7"][1], out["w1"], atol=1e-14)


def test_parallel_train_ensembling_torch_parity():
    _close(*_parity(parallel_train, parallel_train_data()))


def test_jacrev_and_jacfwd_refuse_complex_as_pytorch():
    F = lucid.func
    z = lucid.tensor([1 + 2j, 3 - 1j], dtype=lucid.complex128)
    x = lucid.tensor([0.5, -1.0], dtype=lucid.float64)
    for name, jac in (("jacrev", F.jacrev), ("jacfwd", F.jacfwd)):
        with pytest.raises(RuntimeError, match=name + r": Expected all inputs to be real .* idx: 0 \(shape \(2,\)"):
            jac(lambda a: a.sin())(z)
        with pytest.raises(RuntimeError, match=name + ": Expected all inputs to be real .* idx: 1"):
            jac(lambda a, b: a.sin() * b.abs(), argnums=0)(x, z)  # not differentiated, still refused
        with pytest.raises(RuntimeError, match=name + ": Expected all outputs to be real .* idx: 0"):
            jac(lambda a: lucid.polar(a, a))(x)
        j, aux = jac(lambda a: (a.sin(), a * 1j), has_aux=True)(x)  # a complex aux is fine
        np.testing.assert_allclose(j.cpu().numpy(), np.diag(np.cos([0.5, -1.0])), atol=1e-15)
        np.testing.assert_allclose(aux.cpu().numpy(), [0.5j, -1j])
        j = jac(lambda a: lucid.view_as_real(lucid.polar(a, a)))(x)  # the real view is the way through
        d = np.exp(1j * np.array([0.5, -1.0])) * (1 + 1j * np.array([0.5, -1.0]))
        np.testing.assert_allclose(j.cpu().numpy()[[0, 1], :, :].diagonal(axis1=0, axis2=2).T,
                                   np.stack([d.real, d.imag], 1), atol=1e-15)
    with pytest.raises(RuntimeError, match="jacfwd: Expected all inputs to be real"):
        F.hessian(lambda a: (a.abs() ** 4).sum())(z)
    # autograd.functional's vectorized Jacobian still takes complex, as PyTorch's does
    jr = lucid.autograd.functional.jacobian(lambda a: a.sin(), z, vectorize=True)
    jf = lucid.autograd.functional.jacobian(lambda a: a.sin(), z, vectorize=True, strategy="forward-mode")
    np.testing.assert_allclose(jf.cpu().numpy(), np.diag(np.cos(z.cpu().numpy())), atol=1e-14)
    np.testing.assert_allclose(jr.cpu().numpy(), np.diag(np.cos(z.cpu().numpy())).conj(), atol=1e-14)


def test_jacrev_and_jacfwd_complex_torch_parity():
    torch = pytest.importorskip("torch")
    z = np.array([1 + 2j, 3 - 1j])
    for mod in (torch, lucid):
        for jac in (mod.func.jacrev, mod.func.jacfwd):
            with pytest.raises(RuntimeError, match="Expected all inputs to be real but received complex tensor"):
                jac(lambda a: a.sin())(mod.tensor(z))
    got = lucid.autograd.functional.jacobian(lambda a: a.exp() * a.sum(), lucid.tensor(z), vectorize=True)
    ref = torch.autograd.functional.jacobian(lambda a: a.exp() * a.sum(), torch.tensor(z), vectorize=True)
    np.testing.assert_allclose(got.cpu().numpy(), ref.numpy(), atol=1e-13)
