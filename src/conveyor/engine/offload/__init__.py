"""A DataPipe sub-graph behind a channel, in a thread or a process."""
