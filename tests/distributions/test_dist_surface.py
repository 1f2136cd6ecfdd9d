"""PyTorch's public surface of torch.distributions: every public name and module path exists;
MixtureSameFamilyConstraint (MixtureSameFamily's support) and CatTransform.length."""
import math

import numpy as np
import pytest

import lucid.distributions as D
from lucid.distributions import constraints

from disthelpers import f64


def test_torch_public_names_exist():
    torch = pytest.importorskip("torch")
    TD = torch.distributions
    assert [n for n in TD.__all__ if not hasattr(D, n)] == []
    assert [n for n in TD.constraints.__all__ if not hasattr(D.constraints, n)] == []
    assert [n for n in TD.transforms.__all__ if not hasattr(D.transforms, n)] == []


def test_mixture_same_family_constraint():
    comp = D.Uniform(f64(np.zeros((2, 3))), f64([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]]))
    m = D.MixtureSameFamily(D.Categorical(probs=f64(np.full((2, 3), 1 / 3))), comp, validate_args=True)
    assert isinstance(m.support, constraints.MixtureSameFamilyConstraint)
    # every component's support must hold the value (PyTorch's rule); batch (2,) != components (3,)
    assert m.support.check(f64([0.5, 1.5])).tolist() == [True, True]
    assert m.support.check(f64([[1.5, 0.5], [0.5, 2.5]])).tolist() == [[False, True], [True, False]]
    lp = m.log_prob(f64([0.5, 1.5]))
    np.testing.assert_allclose(lp.numpy(), [math.log((1 + 1 / 2 + 1 / 3) / 3), math.log(1 / 2)], rtol=1e-12)
    with pytest.raises(ValueError, match="support"):
        m.log_prob(f64([0.5, 2.5]))
    mvn = D.MultivariateNormal(f64(np.zeros((3, 2))), covariance_matrix=f64(np.eye(2)))
    c = D.MixtureSameFamily(D.Categorical(probs=f64([0.2, 0.3, 0.5])), mvn).support
    assert c.event_dim == 1 and not c.is_discrete
    assert c.check(f64(np.zeros((4, 2)))).shape == (4,)
    with pytest.raises(TypeError, match="base_constraint"):
        constraints.MixtureSameFamilyConstraint("real")


def test_cat_transform_length():
    t = D.transforms.CatTransform([D.transforms.ExpTransform(), D.transforms.identity_transform], 0, [2, 3])
    assert t.length == 5


def test_torch_module_paths_import():
    from lucid.distributions.one_hot_categorical import OneHotCategoricalStraightThrough
    from lucid.distributions.studentT import StudentT
    from lucid.distributions.uniform import Uniform

    import lucid.distributions.relaxed_categorical as rc

    assert Uniform is D.Uniform and StudentT is D.StudentT and OneHotCategoricalStraightThrough is D.OneHotCategoricalStraightThrough
    assert rc.__all__ == ["ExpRelaxedCategorical", "RelaxedOneHotCategorical"] and rc.ExpRelaxedCategorical is D.ExpRelaxedCategorical
    assert D.wishart.Wishart is D.Wishart


def test_every_torch_module_path_exists():
    torch = pytest.importorskip("torch")
    import importlib
    import pkgutil

    missing = []
    for info in pkgutil.iter_modules(torch.distributions.__path__):
        ours = importlib.import_module(f"lucid.distributions.{info.name}")
        theirs = importlib.import_module(f"torch.distributions.{info.name}")
        missing += [f"{info.name}.{n}" for n in getattr(theirs, "__all__", ()) if not hasattr(ours, n)]
    assert missing == []
