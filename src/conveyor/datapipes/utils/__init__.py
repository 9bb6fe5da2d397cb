"""torch's module paths under ``datapipes.utils`` (common, decoder, snapshot)."""
