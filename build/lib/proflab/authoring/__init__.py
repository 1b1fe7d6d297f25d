"""Writing labs: ``proflab new-lab`` (a skeleton that runs) and ``proflab validate-lab`` (is it ready?)."""
