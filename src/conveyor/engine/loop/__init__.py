"""The iterators: an epoch's dispatch, ledgers and result buffers, its options and plan."""
