"""``AdaptiveLogSoftmaxWithLoss``: the adaptive softmax of Grave et al. (2016), PyTorch's layout.

The parameters are PyTorch's (``head``: a Linear to the shortlist plus one logit per cluster;
``tail``: a ModuleList of ``Sequential(Linear(in, in // div_value**i), Linear(.., cluster size))``,
no biases), so a PyTorch ``state_dict`` loads as is.
"""
from __future__ import annotations

from collections import namedtuple

from .containers import ModuleList, Sequential
from .linear import Linear
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


def _lucid():
    import lucid

    return lucid


class AdaptiveLogSoftmaxWithLoss(Module):
    """Efficient softmax approximation for large, Zipf-distributed output spaces.

    Classes ``[0, cutoffs[0])`` form the head's shortlist; each further range
    ``[cutoffs[i-1], cutoffs[i])`` (the last ending at ``n_classes``) is a cluster, scored
    through a projection to ``in_features // div_value**i`` features and reached through one
    head logit. Only the clusters some target falls in are evaluated. Labels should be sorted
    by frequency (0 the most frequent).

    Parameters
    ----------
    in_features : int
        Features of each input.
    n_classes : int
        Number of classes.
    cutoffs : sequence of int
        Unique, increasing, each in ``[1, n_classes - 1]``.
    div_value : float
        Shrinks each next cluster's projection (default 4.0).
    head_bias : bool
        Give the head a bias (default False).
    device, dtype : optional
        Of the parameters.

    Returns
    -------
    _ASMoutput (a named tuple)
        ``output``: each target's log-probability, shape (N,) (or () for an unbatched input);
        ``loss``: the mean negative log-likelihood, a scalar.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> asm = nn.AdaptiveLogSoftmaxWithLoss(16, 10, cutoffs=[4, 8])
    >>> out = asm(lucid.randn(3, 16), lucid.tensor([0, 5, 9]))
    >>> out.output.shape, out.loss.shape, asm.log_prob(lucid.randn(3, 16)).shape
    ((3,), (), (3, 10))
    """

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False, device=None,
                 dtype=None):
        super().__init__()
        name = type(self).__name__
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError(f"{name}: cutoffs should be a sequence of length larger than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > (n_classes - 1)
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError(f"{name}: cutoffs should be a sequence of unique, positive integers sorted in an "
                             "increasing order, where each value is between 1 and n_classes-1")
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, device=device, dtype=dtype),
                                        Linear(hsz, osz, bias=False, device=device, dtype=dtype)))

    def reset_parameters(self):
        """Re-initialise the head and every cluster projection as at construction."""
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def _check(self, input, target):
        name = type(self).__name__
        if target.ndim == 1:
            if input.shape[0] != target.shape[0]:
                raise RuntimeError(f"{name}: Input and target should have the same size in the batch dimension.")
            if input.ndim != 2:
                raise RuntimeError(f"{name}: 1D target tensor expects 2D input tensors, but found inputs with "
                                   f"size {tuple(input.shape)}")
        elif target.ndim == 0:
            if input.ndim != 1:
                raise RuntimeError(f"{name}: 0D target tensor expects 1D input tensors, but found inputs with "
                                   f"size {tuple(input.shape)}")
        else:
            raise RuntimeError(f"{name}: 0D or 1D target tensor expected, multi-target not supported")
        if target.dtype.kind not in "iu":
            raise RuntimeError(f"{name}: expected target of integer class indices, got {target.dtype}")

    def forward(self, input_, target_):
        """``(output, loss)``: each target's log-probability and their mean negative."""
        import lucid.nn.functional as F

        self._check(input_, target_)
        batched = target_.ndim > 0
        input = input_ if batched else input_.unsqueeze(0)
        target = target_ if batched else target_.unsqueeze(0)
        bad = (target < 0) | (target >= self.n_classes)
        if target.shape[0] and bool(bad.any()):  # PyTorch reads back here too (its row counts)
            raise RuntimeError(f"{type(self).__name__}: Target values should be in [0, {self.n_classes - 1}], "
                               f"but values in range [{target.min().item()}, {target.max().item()}] were found. ")
        # The head's class for each row: the target itself in the shortlist, else its cluster's logit.
        cluster = sum((target >= c).long() for c in self.cutoffs[:-1])
        head_index = _lucid().where(cluster == 0, target, cluster + (self.shortlist_size - 1))
        head_logprob = F.log_softmax(self.head(input), dim=1)
        output = head_logprob.gather(1, head_index.unsqueeze(1)).squeeze(1)
        for i in range(self.n_clusters):
            low, high = self.cutoffs[i], self.cutoffs[i + 1]
            rows = ((target >= low) & (target < high)).nonzero(as_tuple=True)[0]
            if rows.shape[0] == 0:
                continue  # only the clusters some target falls in are evaluated
            logprob = F.log_softmax(self.tail[i](input.index_select(0, rows)), dim=1)
            local = logprob.gather(1, (target.index_select(0, rows) - low).unsqueeze(1)).squeeze(1)
            output = output.index_add(0, rows, local)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _get_full_log_prob(self, input, head_output):
        """Log-probabilities of all ``n_classes`` from ``input`` and its head logits."""
        import lucid.nn.functional as F

        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            parts.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return _lucid().cat(parts, 1)

    def _batched(self, input, what):
        if input.ndim not in (1, 2):
            raise RuntimeError(f"{type(self).__name__}.{what}: expected input of shape (N, in_features) or "
                               f"(in_features,), got {tuple(input.shape)}")
        return input if input.ndim == 2 else input.unsqueeze(0)

    def log_prob(self, input):
        """Log-probabilities of every class: (N, n_classes) for an (N, in_features) input.

        Examples
        --------
        >>> import lucid, lucid.nn as nn
        >>> asm = nn.AdaptiveLogSoftmaxWithLoss(4, 6, cutoffs=[2])
        >>> round(asm.log_prob(lucid.randn(2, 4)).exp().sum(1).tolist()[0], 6)
        1.0
        """
        x = self._batched(input, "log_prob")
        out = self._get_full_log_prob(x, self.head(x))
        return out if input.ndim == 2 else out.squeeze(0)

    def predict(self, input):
        """The most probable class of each row (``log_prob(input).argmax(1)``, evaluating the
        clusters only for rows whose best head logit is a cluster's).

        Examples
        --------
        >>> import lucid, lucid.nn as nn
        >>> asm = nn.AdaptiveLogSoftmaxWithLoss(4, 6, cutoffs=[2])
        >>> x = lucid.randn(5, 4)
        >>> bool((asm.predict(x) == asm.log_prob(x).argmax(1)).all())
        True
        """
        lucid = _lucid()
        x = self._batched(input, "predict")
        head_output = self.head(x)
        output = lucid.argmax(head_output, dim=1)
        not_in_shortlist = output >= self.shortlist_size
        if not bool(not_in_shortlist.any()):
            pass
        elif bool(not_in_shortlist.all()):
            output = lucid.argmax(self._get_full_log_prob(x, head_output), dim=1)
        else:
            log_prob = self._get_full_log_prob(x[not_in_shortlist], head_output[not_in_shortlist])
            output[not_in_shortlist] = lucid.argmax(log_prob, dim=1)
        return output if input.ndim == 2 else output.squeeze(0)
