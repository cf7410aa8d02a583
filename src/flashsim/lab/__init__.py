"""``flashsim.lab``: the numbers behind the documentation's lab page (``flashsim lab``).

The page lets a reader move policy lag, the gate threshold δ, the algorithm and the batch design and
watch exact learning curves, the gate's acceptance and the update's quality change. Every setting of
the grid (:mod:`~flashsim.lab.grid`) is computed with the simulator and the exact-gradient measures
(:mod:`~flashsim.lab.compute`), resumably, and gathered into one compact data script that the page
reads (``docs/lab/data.js``).
"""

from flashsim.lab.compute import lab_data, learning_curve, read_data, run_lab, update_quality, write_data
from flashsim.lab.grid import LabConfig, Setting, delta_label, settings

__all__ = ["LabConfig", "Setting", "delta_label", "lab_data", "learning_curve", "read_data", "run_lab", "settings",
           "update_quality", "write_data"]
