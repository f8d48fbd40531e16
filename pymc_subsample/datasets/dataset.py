"""The loaders' result type, :class:`Dataset`, and the standardisation of its features."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Dataset", "standardize"]


@dataclass(frozen=True, eq=False)
class Dataset:
    """A design matrix with labels, as returned by the ``load_*`` functions.

    Attributes
    ----------
    X : numpy.ndarray
        ``float64`` array of shape ``(N, p)``. No intercept column is included.
    y : numpy.ndarray
        One-dimensional array of length ``N`` (0/1 ``float64`` labels for the
        bundled loaders).
    feature_names : tuple of str
        ``p`` column names.
    mean, scale : numpy.ndarray or None
        Standardisation constants of length ``p`` (``X = (X_raw - mean) /
        scale``), or ``None`` when the features were not standardised.
    """

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None

    def __post_init__(self) -> None:
        X = np.asarray(self.X, dtype=np.float64)
        y = np.asarray(self.y)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(
                f"y must be 1-dimensional with {X.shape[0]} entries, got shape {y.shape}"
            )
        names = tuple(str(name) for name in self.feature_names)
        if len(names) != X.shape[1]:
            raise ValueError(
                f"feature_names has {len(names)} entries but X has {X.shape[1]} columns"
            )
        if (self.mean is None) != (self.scale is None):
            raise ValueError("mean and scale must both be given or both be None")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "feature_names", names)
        for field in ("mean", "scale"):
            value = getattr(self, field)
            if value is not None:
                value = np.asarray(value, dtype=np.float64)
                if value.shape != (X.shape[1],):
                    raise ValueError(
                        f"{field} must have shape ({X.shape[1]},), got {value.shape}"
                    )
                object.__setattr__(self, field, value)

    @property
    def n_obs(self) -> int:
        """Number of rows ``N``."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of columns ``p`` (no intercept)."""
        return int(self.X.shape[1])

    @property
    def standardized(self) -> bool:
        """Whether ``X`` holds standardised features."""
        return self.mean is not None

    def standardize_new(self, X_new) -> np.ndarray:
        """Apply this data set's standardisation constants to new rows.

        Parameters
        ----------
        X_new : array_like
            Raw (unstandardised) rows of shape ``(M, p)``, or a single row of
            shape ``(p,)``, in the same column order as :attr:`feature_names`.

        Returns
        -------
        numpy.ndarray
            ``(X_new - mean) / scale`` as ``float64`` with the input's shape.
            If the data set was not standardised, a ``float64`` copy of
            ``X_new`` is returned unchanged.
        """
        X_new = np.array(X_new, dtype=np.float64)  # always a copy
        if X_new.ndim not in (1, 2) or X_new.shape[-1] != self.n_features:
            raise ValueError(
                f"X_new must have shape (M, {self.n_features}) or ({self.n_features},), "
                f"got {X_new.shape}"
            )
        if self.mean is None:
            return X_new
        return (X_new - self.mean) / self.scale

    def __repr__(self) -> str:
        return (
            f"Dataset(N={self.n_obs}, p={self.n_features}, "
            f"standardized={self.standardized}, "
            f"feature_names={self.feature_names[:5]!r}{'...' if self.n_features > 5 else ''})"
        )


def standardize(X) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre and scale the columns of ``X``.

    Parameters
    ----------
    X : array_like
        Array of shape ``(N, p)`` with ``N >= 1``.

    Returns
    -------
    Xs : numpy.ndarray
        ``(X - mean) / scale`` as ``float64``.
    mean : numpy.ndarray
        Column means, shape ``(p,)``.
    scale : numpy.ndarray
        Column population standard deviations (``ddof=0``), shape ``(p,)``.
        Constant columns get scale 1 (so they become all zeros).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError("cannot standardise an empty array (no rows)")
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    constant = np.ptp(X, axis=0) == 0
    scale[constant | ~(scale > 0)] = 1.0
    return (X - mean) / scale, mean, scale


def make_dataset(X, y, feature_names, standardize_: bool) -> Dataset:
    """A :class:`Dataset` of ``X`` and ``y``, standardised when ``standardize_`` is true."""
    if standardize_:
        Xs, mean, scale = standardize(X)
        return Dataset(Xs, y, tuple(feature_names), mean, scale)
    return Dataset(X, y, tuple(feature_names))
