"""The workers: their kinds, pools, loop, messages, seeding and shutdown."""
