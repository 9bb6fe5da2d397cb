"""The ``conveyor`` command line: ``conveyor shards write|inspect`` (``conveyor bench`` later)."""
