"""The per-request benchmark: short streamed chats in turn, CPU and connections (run.py)."""
