"""Whole systems side by side: every method at size beside CTranslate2 (size_sweep.py), the server under load
(serve_load.py), batching schedules (batch_schedules.py, continuous_batching.py), decoders alternated pass by pass
(peer_alternating.py)."""
