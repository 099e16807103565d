"""A trained run served: the HTTP translation server's library (server.py, over a Translator)."""
