"""The loading engine: the only package that starts threads or processes.

Public pieces are re-exported by `conveyor` itself; everything here is internal.
"""
