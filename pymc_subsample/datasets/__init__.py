"""Loaders for the real data sets used in tests, examples and benchmarks.

The loaders read the public data sets in their original distribution formats
(plain or compressed text, LIBSVM sparse text, MNIST IDX files). They take a
``path`` that is either the data file itself or the directory that holds it,
so they work both with the small copies kept in ``../shared/data`` and with
full-size originals downloaded by a user.

Every loader returns a :class:`Dataset` with a dense ``float64`` design matrix
and 0/1 labels for binary classification. **No intercept column is added**:
models built on these data add their own intercept. Pass
``standardize=True`` to centre and scale the features (population standard
deviation, ``ddof=0``); the constants are kept on the result so that new rows
can be transformed identically with :meth:`Dataset.standardize_new`.

The package holds one module per source (``skin``, ``cod_rna``, ``mnist``, ``covtype``,
``higgs``), one per file format (``libsvm``, ``idx``), the result type (``dataset``), and what
the loaders share: paths, decompression, checks and their messages (``_common``). Only
:mod:`numpy` and the standard library are used.
"""

from pymc_subsample.datasets.cod_rna import load_cod_rna
from pymc_subsample.datasets.covtype import load_covtype
from pymc_subsample.datasets.dataset import Dataset, standardize
from pymc_subsample.datasets.higgs import HIGGS_FEATURE_NAMES, load_higgs
from pymc_subsample.datasets.idx import read_idx
from pymc_subsample.datasets.libsvm import read_libsvm
from pymc_subsample.datasets.mnist import load_mnist
from pymc_subsample.datasets.skin import load_skin

__all__ = [
    "HIGGS_FEATURE_NAMES",
    "Dataset",
    "load_cod_rna",
    "load_covtype",
    "load_higgs",
    "load_mnist",
    "load_skin",
    "read_idx",
    "read_libsvm",
    "standardize",
]
