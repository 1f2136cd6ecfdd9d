import numpy as np, time, sys
def bench(step, n=30):
    for _ in range(3): step()
    ts = []
    for _ in range(n):
        a = time.perf_counter(); step(); ts.append(time.perf_counter() - a)
    return np.median(ts) * 1e3, np.min(ts) * 1e3
rng = np.random.default_rng(0)
X = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
Y = rng.integers(0, 10, 64)
def lucid_step():
    import lucid, lucid.nn as nn, lucid.nn.functional as F
    model = nn.Sequential(nn.Conv2d(1, 16, 3), nn.ReLU(), nn.Conv2d(16, 32, 3), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    x, y = lucid.tensor(X), lucid.tensor(Y)
    params = list(model.parameters())
    def step():
        loss = F.cross_entropy(model(x), y)
        for p in params: p.grad = None
        loss.backward()
        with lucid.no_grad():
            for p in params: p._data -= 0.1 * p.grad._data
    return step
def torch_step():
    import torch
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.tensor(X), torch.tensor(Y)
    def step():
        opt.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
    return step
if __name__ == "__main__":
    if len(sys.argv) > 2:
        import lucid.ops.conv as C
        C._scratch = lambda role, shape, dtype, zero=False: (np.zeros if zero else np.empty)(shape, dtype)
    print("lucid W5 step ms (median, min): %.1f %.1f" % bench(lucid_step()))
    try:
        print("torch W5 step ms (median, min): %.1f %.1f" % bench(torch_step()))
    except ImportError:
        pass
