"""Command-line tools: ``ingest`` (with subcommands) and ``ingest-bench``."""
