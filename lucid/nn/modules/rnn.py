"""``lucid.nn.modules.rnn``: PyTorch's module path for the recurrent layers and cells."""
import warnings

from ..rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: F401

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


def _apply_permutation(tensor, permutation, dim=1):
    """``tensor`` reordered along ``dim`` by ``permutation`` (a packed sequence's sort order)."""
    return tensor.index_select(dim, permutation)


def apply_permutation(tensor, permutation, dim=1):
    """Deprecated spelling of :func:`_apply_permutation` (FutureWarning, as PyTorch).

    Examples
    --------
    >>> import warnings, lucid
    >>> from lucid.nn.modules.rnn import apply_permutation
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     apply_permutation(lucid.tensor([[1.0, 2.0, 3.0]]), lucid.tensor([2, 0, 1]))
    tensor([[3., 1., 2.]])
    """
    warnings.warn("`apply_permutation` is deprecated, please use `tensor.index_select(dim, permutation)` instead",
                  FutureWarning, stacklevel=2)
    return _apply_permutation(tensor, permutation, dim)
