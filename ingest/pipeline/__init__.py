"""Workers, queues, batcher and statistics of a running reader."""
