"""A trained run outside training: the HTTP translation server's library (server.py, over a Translator)
and the CTranslate2 conversion (ct2.py)."""
