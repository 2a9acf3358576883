"""Models: loading (Hugging Face, GGUF, the hub and its cache), the architecture registry, tiny random models
from real configs, and adapters for TransformerLens and nnsight."""
