"""Ray job entry points: thin wrappers that parse arguments and call loadgen."""
