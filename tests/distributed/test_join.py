"""``lucid.distributed.algorithms.join``: ``Join``/``Joinable``/``JoinHook`` (NOTE [Generic join]).

The MPI part is one ``lucid-run`` launch per world size running every check of joinworker.py
(uneven inputs: rank r has r + 1 iterations); argument errors need no MPI.
"""
import importlib.util
import os
import sys

import pytest

import lucid
import lucid.nn as nn
from lucid.distributed.algorithms.join import Join, Joinable, JoinHook
from lucid.distributed.optim import ZeroRedundancyOptimizer
from lucid.distributed.run import find_mpiexec

from rankchecks import assert_checks_pass  # noqa: E402  (pytest puts this folder on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"{n}ranks")
def test_every_join_check_on_every_rank(n, tmp_path):
    sys.path.insert(0, HERE)
    import joinworker

    assert_checks_pass("joinworker.py", joinworker.CHECKS, n, tmp_path, timeout=90)


class _Plain(Joinable):
    def __init__(self, group=None):
        super().__init__()
        self.group = group

    def join_hook(self, **kwargs):
        return JoinHook()

    join_device = "cpu"

    @property
    def join_process_group(self):
        return self.group


def test_join_arguments_are_checked_as_pytorch():
    with pytest.raises(ValueError, match="at least one joinable"):
        Join([])
    with pytest.raises(TypeError, match="Join: expected Joinable"):
        Join([object()])
    with pytest.raises(ValueError, match="multiple process groups"):
        Join([_Plain(), _Plain(group=object())])
    with pytest.raises(TypeError):
        JoinHook.__init__  # noqa: B018  (JoinHook is concrete)
        Joinable()  # abstract


def test_join_configurations_mark_the_first_joinable_and_reset_on_exit():
    a, b = _Plain(), _Plain()
    assert not a._join_config.enable
    j = Join([a, b], enable=False, throw_on_early_termination=True)
    assert a._join_config.is_first_joinable and not b._join_config.is_first_joinable
    assert a._join_config.throw_on_early_termination and not a._join_config.enable
    with j:
        assert Join.notify_join_context(a) is None  # disabled: no communication
    assert a._join_config == b._join_config == (False, False, False)
    with pytest.raises(RuntimeError, match="notify_join_context: object has no join configuration"):
        Join.notify_join_context(object())


def test_an_error_in_the_body_propagates_and_resets_the_configuration():
    a = _Plain()
    with pytest.raises(KeyError):
        with Join([a]):
            raise KeyError("x")
    assert not a._join_config.enable


def test_zero_redundancy_optimizer_is_a_joinable():
    model = nn.Linear(2, 1)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=lucid.optim.SGD, lr=0.5)
    assert isinstance(opt, Joinable) and isinstance(opt, lucid.optim.Optimizer)
    assert opt.join_process_group is None and str(opt.join_device) == str(model.weight.device)
    hook = opt.join_hook()
    model(lucid.ones(3, 2)).sum().backward()
    before = model.bias.detach().numpy().copy()
    hook.main_hook()  # a joined rank's step: its share with the gradients it holds
    assert abs(model.bias.item() - (before[0] - 0.5 * 3.0)) < 1e-6
