"""Package-level promises: no global state changed on import, public names present."""

import subprocess
import sys


def test_import_changes_no_global_state():
    code = (
        "import pymc as pm; before = list(pm.STEP_METHODS); import pymc_subsample as pms; "
        "assert list(pm.STEP_METHODS) == before, 'STEP_METHODS changed'; "
        "missing = [n for n in ['HMCECS', 'SubsampleMH', 'SGLD', 'SGHMC', 'SGFS', 'ISS', 'find_map', "
        "'compare', 'datasets'] if not hasattr(pms, n)]; assert not missing, missing"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
