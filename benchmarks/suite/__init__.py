"""The accelerator suite: what a rare, short lease of a GPU is spent on (accelerator_suite.py, run by
accelerator_suite.sh), its plan and budget (suite_plan.py), and the pack prepared for it here (accelerator_pack.py)."""
