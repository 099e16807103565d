"""Device meshes and the sharding of parameters and batches over them (sharding.py)."""
