"""η's exact affine map kept for all N rows: η_k = η_k(0) + J_k x, x the coordinates η is affine
in (θ, or a row-free φ(θ)), J held sparsely as the set-up's layout reads it
(:mod:`~pymc_subsample.model.one_hot`), read in one pass through NumPy
(:meth:`~pymc_subsample.model.distributional.DistributionalRegression.sparse_affine`).

A batch that knows its rows reads theirs by index: the perturbed estimate's η
(:mod:`~pymc_subsample.estimators.eta_estimate`) and the set-up's sums in φ
(:meth:`~pymc_subsample.model.tall.TallModel.loglik_sums_in_phi`), which would otherwise evaluate
η at every point of the layout for every chunk of rows.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["KEPT_AFFINE_MAX_VALUES", "AffineRows", "KeptAffineRows", "affine_rows", "kept_affine_rows"]

#: η's offsets and Jacobians of all N rows, (d + 1) values a row for each η_j that differs between
#: rows, are kept up to this many values (320 MB): 10⁶ rows of a logistic regression with d = 30 fit
#: (the rows' own X is 240 MB)
KEPT_AFFINE_MAX_VALUES = 40_000_000


class AffineRows(NamedTuple):
    """η_k = η_k(0) + J_k x of a set of rows, x the coordinates η is affine in (θ, or φ(θ)), with J
    held sparsely as the view's layout reads it
    (:meth:`~pymc_subsample.model.distributional.DistributionalRegression.sparse_affine`):

    - the η_j that differ between rows: ``offset`` (p_v, n); ``jacobian`` (p_v, n_dense, n), J's
      columns of the coordinates ``dense``, each a row of the array; per group block b, ``coef``
      (p_v, n_b, n) and ``owner`` (n_b, n): row k reads coordinate ``first[b] + stride[b] ·
      owner[b, k]`` times ``coef``;
    - those the same on every row (a scale, a shape), once: ``constant_offset`` (p_c,) and
      ``constant_jacobian`` (p_c, n_dense); they read no block;
    - ``slot`` (p,): η_j's row among the former (≥ 0), or −1 − its row among the latter.

    Why sparse: a group effect a[g_k] makes J dense in every group's coordinate, while a row reads
    one; kept densely, the centred zoo model's J (d = 24) took 0.95 s to write at 10⁶ rows. Why a
    column a row: the estimate's loops then run along the rows, contiguous, which LLVM vectorises
    without reordering a sum (η_j += x_c J_jc·) and, for the gradient, as long sums (measured at
    m = 1000: the closed-form estimate 20.9 → 14.2 µs at d = 31, 11.6 → 8.1 µs at d = 4, against J_k
    a row). The rows of all N (:class:`KeptAffineRows`) hold J a row a row instead.
    """

    offset: np.ndarray
    jacobian: np.ndarray
    coef: np.ndarray
    owner: np.ndarray
    constant_offset: np.ndarray
    constant_jacobian: np.ndarray
    slot: np.ndarray
    dense: np.ndarray
    first: np.ndarray
    stride: np.ndarray

    @property
    def constant(self) -> tuple:
        return tuple(bool(s < 0) for s in self.slot)


class KeptAffineRows(AffineRows):
    """:class:`AffineRows` of all N rows, with ``jacobian`` (p_v, N, n_dense): J_k a row. A block
    update reads a few rows by index, each then one contiguous read, where the columns of a batch's
    layout would make each row n_dense reads far apart; :meth:`rows` gives a batch's layout.
    """

    def rows(self, rows) -> AffineRows:
        """:class:`AffineRows` of the rows ``rows`` (indices, or a slice)."""
        return AffineRows(*self)._replace(
            offset=np.ascontiguousarray(self.offset[:, rows]),
            jacobian=np.ascontiguousarray(self.jacobian[:, rows].transpose(0, 2, 1)),
            coef=np.ascontiguousarray(self.coef[:, :, rows]), owner=np.ascontiguousarray(self.owner[:, rows]))

    def with_rows(self, offset, jacobian, coef, owner) -> AffineRows:
        """:class:`AffineRows` of a batch from its :meth:`sparse_affine` arrays (every η_j), read with
        the η_j constant over all N rows as such.
        """
        varying = ~np.array(self.constant)
        return AffineRows(*self)._replace(offset=np.ascontiguousarray(offset[varying]),
                                          jacobian=np.ascontiguousarray(jacobian[varying]),
                                          coef=np.ascontiguousarray(coef[varying]),
                                          owner=np.ascontiguousarray(owner))


def kept_affine_rows(view, n_rows, slices, chunk_size, phi=False, varying=None) -> KeptAffineRows | None:
    """:class:`KeptAffineRows` of every row in θ (or in φ), from ``slices(start, stop)`` chunk by chunk,
    or None where they would hold more than :data:`KEPT_AFFINE_MAX_VALUES` values.

    The η_j the same on every row of the first chunk, reading no group block, are taken as constant
    and only checked against it in the others (then read again as varying, where one is not): a
    scale's J is not written N times. ``varying``: the η_j known to differ between rows.
    """
    # measured at 10⁶ rows (StudentT, p = 3, d = 5): 0.45 s with every η_j written per row, the
    # (p, N, d) copies most of it; η at the d + 1 points 0.06 s
    layout = view.layout(phi=phi)
    p, n_dense, n_blocks = view.n_eta, layout.dense.size, len(layout.blocks)
    arrays = constant = None
    for start in range(0, n_rows, chunk_size):
        stop = min(start + chunk_size, n_rows)
        offset, jacobian, coef, owner = view.sparse_affine(slices(start, stop), phi=phi)
        if constant is None:
            same = _same_on_every_row(offset, jacobian, coef, offset[:, 0], jacobian[:, :, 0])
            constant = same & ~(np.zeros(p, dtype=bool) if varying is None else varying)
            constant_offset, constant_jacobian = offset[constant, 0], jacobian[constant, :, 0]
            p_varying = p - int(constant.sum())
            if (p_varying * (1 + n_dense + n_blocks) + n_blocks) * n_rows > KEPT_AFFINE_MAX_VALUES:
                return None
            arrays = (np.empty((p_varying, n_rows)), np.empty((p_varying, n_rows, n_dense)),
                      np.empty((p_varying, n_blocks, n_rows)), np.empty((n_blocks, n_rows), dtype=np.int64))
        else:
            same = _same_on_every_row(offset[constant], jacobian[constant], coef[constant], constant_offset,
                                      constant_jacobian)
            if not same.all():  # read again, with those η_j as varying
                differs = ~constant
                differs[np.flatnonzero(constant)[~same]] = True
                return kept_affine_rows(view, n_rows, slices, chunk_size, phi=phi, varying=differs)
        arrays[0][:, start:stop] = offset[~constant]
        arrays[1][:, start:stop] = jacobian[~constant].transpose(0, 2, 1)
        arrays[2][:, :, start:stop] = coef[~constant]
        arrays[3][:, start:stop] = owner
    first = np.array([block.start + block.offset for block in layout.blocks], dtype=np.int64)
    stride = np.array([block.stride for block in layout.blocks], dtype=np.int64)
    return KeptAffineRows(*arrays, constant_offset.copy(), np.ascontiguousarray(constant_jacobian),
                          _slots(constant), layout.dense.astype(np.int64), first, stride)


def _same_on_every_row(offset, jacobian, coef, offset_value, jacobian_value):
    """Per η_j: whether every row's η_j(0) (``offset`` (p, m)) and dense J (``jacobian`` (p,
    n_dense, m)) equal ``offset_value`` (p,) and ``jacobian_value`` (p, n_dense), and it reads no
    group block (``coef`` (p, n_blocks, m) zero).
    """
    return ((offset == offset_value[:, None]).all(axis=1)
            & (jacobian == jacobian_value[:, :, None]).all(axis=(1, 2)) & (coef == 0).all(axis=(1, 2)))


def affine_rows(offset, jacobian, coef=None, owner=None, first=(), stride=()) -> AffineRows:
    """:class:`AffineRows` of η(0) ``offset`` (p, n), dense J ``jacobian`` (p, n, d) over every
    coordinate and blocks (``coef`` (p, n_b, n), ``owner`` (n_b, n), ``first``, ``stride``).
    """
    p, n, d = jacobian.shape
    jacobian = jacobian.transpose(0, 2, 1)
    coef = np.zeros((p, 0, n)) if coef is None else coef
    owner = np.zeros((0, n), dtype=np.int64) if owner is None else owner
    constant = _same_on_every_row(offset, jacobian, coef, offset[:, 0], jacobian[:, :, 0])
    return AffineRows(np.ascontiguousarray(offset[~constant]), np.ascontiguousarray(jacobian[~constant]),
                      np.ascontiguousarray(coef[~constant]), owner, offset[constant, 0].copy(),
                      np.ascontiguousarray(jacobian[constant, :, 0]), _slots(constant), np.arange(d),
                      np.asarray(first, dtype=np.int64), np.asarray(stride, dtype=np.int64))


def _slots(constant) -> np.ndarray:
    """:attr:`AffineRows.slot` of the η_j marked ``constant``: each one's row among its kind."""
    return np.where(constant, -np.cumsum(constant), np.cumsum(~constant) - 1).astype(np.int64)
