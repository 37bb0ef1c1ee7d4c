"""Building the artifacts: the ordered builds (``builds``) and their isolation in child processes (``isolation``)."""
