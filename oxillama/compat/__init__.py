"""The llama-cpp-python face of oxillama: `Llama`, `LlamaGrammar`, and the OpenAI-shaped dicts
(oxillama.compat.openai_shapes) the HTTP server shares."""
from oxillama.compat.llama import LLAMA_DEFAULT_SEED, Llama, LlamaGrammar, LlamaState

__all__ = ["Llama", "LlamaGrammar", "LlamaState", "LLAMA_DEFAULT_SEED"]
