"""The views of a tall model besides its generic graph, found once per model graph.

A model whose rows are univariate distributions with parameters affine in θ (or in a row-free φ(θ))
through a link has a distributional-regression view
(:class:`~pymc_subsample.model.distributional.DistributionalRegression`). :class:`ModelViews` looks
for it while the model is analysed (it reads the model's graph), checks it against the model's own
rows on first use, and decides whether the set-up sums come from η; every TallModel of the model
graph shares the answers.
"""

from __future__ import annotations

from pymc_subsample.model.regression_view import affine_view, view_matching_rows

__all__ = ["ETA_HESSIAN_MAX_ROWS", "ModelViews"]

# measured: with J from one vectorised call of η per chunk, the η path's set-up is the faster at
# 10⁷ rows too (d = 31: 14.0 against 18.7 s from npy, 66.3 against 72.2 s from zarr), hence no limit
#: a distributional regression of up to this many rows takes its set-up Σ H_k from η
#: (TallModel.regression_view); None: any number
ETA_HESSIAN_MAX_ROWS = None


class ModelViews:
    """The distributional-regression view of one model graph, and the choices made with it.

    Parameters
    ----------
    base : TallModel
        The TallModel the view is built on and checked with. It holds the model weakly (the model
        is needed here, while the view is looked for, and no more): kept with the analysis, the views
        keep no model alive, and a copy unpickled in another process, without the model, has them.
    """

    def __init__(self, base):
        self.base = base
        self.candidate = affine_view(base)  # before its f is checked against the rows, or None
        self._regression = None
        self._checked = False
        self._eta_sums = None

    def regression_view(self, center):
        """The candidate where its f gives the model's own rows around ``center()`` (checked on
        first use), else None. ``center`` is a function: the point is made only for the check, not
        on every call (an estimator reads the view at each leapfrog step).
        """
        if not self._checked:
            self._regression = (None if self.candidate is None
                                else view_matching_rows(self.candidate, center()))
            self._checked = True
        return self._regression

    def uses_eta_sums(self, center) -> bool:
        """Whether the set-up sums come from η: a checked view, up to :data:`ETA_HESSIAN_MAX_ROWS` rows
        (``center`` as in :meth:`regression_view`).
        """
        if self._eta_sums is None:
            within = ETA_HESSIAN_MAX_ROWS is None or self.base.n_rows <= ETA_HESSIAN_MAX_ROWS
            self._eta_sums = (within and self.candidate is not None
                              and self.regression_view(center) is not None)
        return self._eta_sums
