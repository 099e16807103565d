"""Projected speed on accelerators we do not have: compiled costs on a roofline (roofline.py, costs.py,
projected_speed.py), paper-scale recipes compiled for TPU slices (paper_scale.py), and the unit costs a lent
accelerator measures for the projection (unit_speed.py)."""
