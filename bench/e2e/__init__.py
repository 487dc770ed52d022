"""The end-to-end client benchmark: a fake llama-server and clients side by side (run.py)."""
