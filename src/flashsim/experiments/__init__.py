"""``flashsim.experiments``: the paper's claims as experiments (designs and the verdict rule so far)."""
