"""The Huber objective on log loss for the MoE laws, batched over many parameter vectors.

Every MoE law here is L = c + K(x) / N^alpha + b / D^beta, where x (granularity or sparsity)
enters only the coefficient K of the active-parameter term. Written in logs, as approach 3 is
(Besiroglu et al. 2024): log L = log-sum-exp(t1, t2, t3) with t1 = log K(x) - alpha log N,
t2 = log b - beta log D, t3 = log c; the objective is the sum of Huber losses of the residuals
in log loss. Each form supplies t1 and its derivatives (:class:`NTerm`); this module does the rest,
for many starts at once (:func:`scaling.fitting.core.optim.batch_lbfgs`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

#: Positions of the shared parameters in every form's optimiser vector.
B, C, BETA = 1, 2, 3


class NTerm(Protocol):
    """t1 = log K(x) - alpha log N for a batch of parameter vectors, and its gradient."""

    def __call__(self, X: np.ndarray, logN: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """(t1 of shape (k, n), {position in X: d t1 / d X[:, position], broadcastable to (k, n)})."""
        ...


class MoEObjective:
    """Sum of Huber(prediction - log L) over points, for many parameter vectors (rows of X).

    ``z``: the form's transformed variable per point (log G, or log of the dense fraction 1 - S).
    ``weights`` (R, n): per-replicate point weights (bootstrap counts); row r of a batch uses row
    ``idx[r]`` of them.
    """

    def __init__(self, n_term: NTerm, n_params: int, N: np.ndarray, D: np.ndarray, loss: np.ndarray, z: np.ndarray,
                 delta: float, weights: np.ndarray | None = None):
        self.n_term = n_term
        self.n_params = n_params
        self.logN = np.log(np.asarray(N, float))[None, :]
        self.logD = np.log(np.asarray(D, float))[None, :]
        self.logL = np.log(np.asarray(loss, float))[None, :]
        self.z = np.asarray(z, float)[None, :]
        self.delta = float(delta)
        self.weights = weights

    @property
    def n_points(self) -> int:
        return int(self.logN.shape[1])

    def with_weights(self, weights: np.ndarray | None) -> "MoEObjective":
        out = MoEObjective.__new__(MoEObjective)
        out.__dict__.update(self.__dict__)
        out.weights = weights
        return out

    def predict_log(self, X: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], dict[int, np.ndarray]]:
        """log L predicted at every point for each row of X, the terms' shares, and t1's gradient."""
        t1, dt1 = self.n_term(X, self.logN, self.z)
        t2 = X[:, B : B + 1] - X[:, BETA : BETA + 1] * self.logD
        t3 = np.broadcast_to(X[:, C : C + 1], t1.shape)
        m = np.maximum(np.maximum(t1, t2), t3)
        e1, e2, e3 = np.exp(t1 - m), np.exp(t2 - m), np.exp(t3 - m)
        tot = e1 + e2 + e3
        return m + np.log(tot), [e1 / tot, e2 / tot, e3 / tot], dt1

    def __call__(self, X: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(all="ignore"):  # an overflow gives an infinite objective: the line search backtracks
            pred, (w1, w2, w3), dt1 = self.predict_log(X)
            r = pred - self.logL
            psi = np.clip(r, -self.delta, self.delta)
            if self.weights is not None:
                w = self.weights[idx]
                f = np.einsum("kn,kn,kn->k", w, psi, r) - 0.5 * np.einsum("kn,kn,kn->k", w, psi, psi)
                psi = psi * w
            else:
                f = np.einsum("kn,kn->k", psi, r) - 0.5 * np.einsum("kn,kn->k", psi, psi)
            grad = np.zeros((X.shape[0], self.n_params))
            g1 = psi * w1
            for pos, d in dt1.items():
                grad[:, pos] = np.sum(g1 * d, axis=1)
            g2 = psi * w2
            grad[:, B] = g2.sum(axis=1)
            grad[:, BETA] = -np.sum(g2 * self.logD, axis=1)
            grad[:, C] = np.sum(psi * w3, axis=1)
            bad = ~np.isfinite(f) | ~np.isfinite(grad).all(axis=1)
            f[bad] = np.inf
            grad[bad] = 0.0
        return f, grad

    def single(self, x: np.ndarray, row: int = 0) -> tuple[float, np.ndarray]:
        """One parameter vector, for scipy (bootstrap weights of row ``row`` if any)."""
        f, g = self(np.asarray(x, float)[None, :], np.array([row]))
        return float(f[0]), g[0]

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """d log L / d x at every point (n, n_params): the Gauss-Newton design of the fit at ``x``."""
        with np.errstate(all="ignore"):
            _, (w1, w2, w3), dt1 = self.predict_log(np.asarray(x, float)[None, :])
            J = np.zeros((self.n_points, self.n_params))
            for pos, d in dt1.items():
                J[:, pos] = (w1 * np.broadcast_to(d, w1.shape))[0]
            J[:, B] = w2[0]
            J[:, BETA] = -(w2 * self.logD)[0]
            J[:, C] = w3[0]
        return J


def condition_number(J: np.ndarray) -> float:
    """Condition number of ``J`` with its columns scaled to unit norm (inf when a column vanishes).

    Its square is the condition number of the Gauss-Newton Fisher information; scaling the columns
    makes it independent of the parameters' units.
    """
    norms = np.linalg.norm(J, axis=0)
    if not np.all(np.isfinite(J)) or not np.all(norms > 1e-12 * max(float(norms.max()), 1e-300)):
        return float("inf")
    s = np.linalg.svd(J / norms, compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else float("inf")
