"""``lucid.quasirandom`` (``torch.quasirandom``): Sobol' low-discrepancy sequences.

The points come from SciPy's ``scipy.stats.qmc.Sobol`` (Joe and Kuo's direction numbers, up to
21,201 dimensions): without scrambling they equal PyTorch's point for point. Scrambled
sequences use SciPy's linear matrix scramble and digital shift, seeded from ``seed`` or, without
one, from Lucid's global generator: as random as PyTorch's, not the same numbers.
"""
from __future__ import annotations

import numpy as np

__all__ = ["SobolEngine"]

MAXDIM = 21201


class SobolEngine:
    """A Sobol' sequence generator, as ``torch.quasirandom.SobolEngine``.

    Parameters
    ----------
    dimension : int
        Dimensions of each point, in ``[1, 21201]``.
    scramble : bool
        Randomise the sequence (still low-discrepancy).
    seed : int, optional
        Seed of the scramble; without one it is drawn from Lucid's global generator.

    Examples
    --------
    >>> import lucid
    >>> engine = lucid.quasirandom.SobolEngine(2)
    >>> engine.draw(4)
    tensor([[0.  , 0.  ],
            [0.5 , 0.5 ],
            [0.75, 0.25],
            [0.25, 0.75]])
    >>> engine.num_generated
    4
    """

    MAXBIT = 30
    MAXDIM = MAXDIM

    def __init__(self, dimension, scramble=False, seed=None):
        if isinstance(dimension, bool) or not isinstance(dimension, (int, np.integer)) or not 1 <= dimension <= MAXDIM:
            raise ValueError(f"SobolEngine: supported range of dimensionality is [1, {MAXDIM}], got {dimension!r}")
        self.dimension, self.scramble = int(dimension), bool(scramble)
        if seed is None and self.scramble:
            import lucid

            seed = int(lucid.randint(0, 2 ** 62, (1,), dtype=lucid.int64).item())
        self.seed = seed
        self.reset()

    def _engine(self):
        from scipy.stats import qmc

        return qmc.Sobol(self.dimension, scramble=self.scramble, seed=self.seed, bits=self.MAXBIT)

    def reset(self):
        """Go back to the first point; returns the engine."""
        self._sobol = self._engine()
        self.num_generated = 0
        return self

    def fast_forward(self, n):
        """Skip ``n`` points; returns the engine."""
        n = self._count(n, "fast_forward")
        self._sobol.fast_forward(n)
        self.num_generated += n
        return self

    @staticmethod
    def _count(n, name):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"SobolEngine.{name}: expected a non-negative int, got {n!r}")
        return int(n)

    def _result(self, points, out, dtype, name):
        import lucid

        if dtype is None:
            dtype = out.dtype if out is not None else lucid.get_default_dtype()
        t = lucid.tensor(points, dtype=dtype, device="cpu")  # on the CPU, as PyTorch's
        if out is not None:
            if tuple(out.shape) != tuple(t.shape):
                raise RuntimeError(f"SobolEngine.{name}: out has shape {tuple(out.shape)}, "
                                   f"expected {tuple(t.shape)}")
            with lucid.no_grad():
                out.copy_(t)
            return out
        return t

    def draw(self, n=1, out=None, dtype=None):
        """The next ``n`` points, a ``(n, dimension)`` tensor (default dtype, or ``dtype``/``out``'s)."""
        n = self._count(n, "draw")
        points = self._sobol.random(n) if n else np.empty((0, self.dimension))
        self.num_generated += n
        return self._result(points, out, dtype, "draw")

    def draw_base2(self, m, out=None, dtype=None):
        """The next ``2**m`` points; the total drawn must stay a power of two (balance)."""
        m = self._count(m, "draw_base2")
        total = self.num_generated + 2 ** m
        if total & (total - 1):
            raise ValueError(
                f"SobolEngine.draw_base2: the balance properties of Sobol' points require n to be a power "
                f"of 2. {self.num_generated} points have been previously generated, then: "
                f"n={self.num_generated}+2**{m}={total}. If you still want to do this, use draw() instead.")
        return self.draw(2 ** m, out=out, dtype=dtype)

    def __repr__(self):
        extra = ", scramble=True" if self.scramble else ""
        extra += f", seed={self.seed}" if self.seed is not None else ""
        return f"SobolEngine(dimension={self.dimension}{extra})"
