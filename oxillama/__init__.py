"""oxillama: run GGUF large language models on the CPU at C speed, from Python.

    from oxillama import InferenceEngine
    with InferenceEngine.from_gguf("model.gguf") as engine:
        print(engine.generate("The capital of France is", max_tokens=16, temperature=0))
"""
import importlib
import logging

from oxillama._system import system_info
from oxillama.errors import OxillamaError

logging.getLogger("oxillama").addHandler(logging.NullHandler())

__version__ = "0.1.0"

# public name -> module; imported on first use so `import oxillama` stays light
_LAZY = {
    "InferenceEngine": "oxillama.runtime",
    "Tokenizer": "oxillama.tokenizer",
    "Sampler": "oxillama.sampling",
    "SamplerConfig": "oxillama.sampling",
    "Grammar": "oxillama.grammar",
    "GrammarMatcher": "oxillama.grammar",
    "Completion": "oxillama.runtime.completion",
    "GGUFFile": "oxillama.gguf",
    "GGUFWriter": "oxillama.gguf",
    "QMatrix": "oxillama.quant",
    "SpeculativeEngine": "oxillama.runtime.speculative",
    "BeamSearchConfig": "oxillama.runtime.beam",
    "Scheduler": "oxillama.runtime.scheduler",
    "SequencePool": "oxillama.runtime.batch",
    "Llama": "oxillama.compat",
    "LlamaGrammar": "oxillama.compat",
    "LoraAdapter": "oxillama.lora",
}

__all__ = ["OxillamaError", "system_info", "__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'oxillama' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
