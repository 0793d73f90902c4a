"""Context-offload proxy: an OpenAI-compatible gateway that keeps agent contexts small."""

__version__ = "0.1.0"
