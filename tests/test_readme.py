"""The README's tour runs as written and its claims hold."""
import os
import re

import numpy as np

import lucid

README = os.path.join(os.path.dirname(__file__), "..", "README.md")


def test_readme_tour_runs(tmp_path, monkeypatch):
    code = re.search(r"```python\n(.*?)```", open(README).read(), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    ns = {}
    exec(compile(code, "README.md", "exec"), ns)
    np.testing.assert_allclose(ns["x"].grad.numpy(), [4.0, 6.0])
    assert (tmp_path / "model.safetensors").exists()
    out = ns["Clamp"].apply(lucid.tensor([-2.0, 0.5], requires_grad=True), -1.0, 1.0)
    np.testing.assert_allclose(out.detach().numpy(), [-1.0, 0.5])
