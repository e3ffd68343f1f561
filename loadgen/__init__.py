"""loadgen: capacity testing for LLM servers with speculative decoding."""

__version__ = "0.1.0"
