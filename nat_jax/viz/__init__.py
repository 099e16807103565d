"""Pictures of how a decoder works: the DA-Transformer's DAG with each decoder's path (dag.py, behind
`python -m nat_jax.dagviz`) and Jacobi decoding's token states per iteration (ddg.py, behind
`python -m nat_jax.ddgviz`); what both share in pictures.py."""
