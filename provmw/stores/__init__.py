"""State the middleware keep between calls, behind small interfaces.

Each store here is the embedded default; the Redis plugin serves the same interfaces
across processes and hosts.
"""
