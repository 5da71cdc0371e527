"""The llama-cpp-python face of oxillama: `Llama`, `LlamaGrammar`, `LlamaState` (oxillama.compat.llama).
Its OpenAI shapes are oxillama.openai's, which the HTTP server shares; importing a submodule of this
package does not load the facade."""
import importlib

__all__ = ["Llama", "LlamaGrammar", "LlamaState", "LLAMA_DEFAULT_SEED"]


def __getattr__(name):
    if name in __all__:
        return getattr(importlib.import_module("oxillama.compat.llama"), name)
    raise AttributeError(f"module 'oxillama.compat' has no attribute {name!r}")
