"""GGUF files: a validating, zero-copy reader (GGUFFile) and a writer (GGUFWriter).

    with GGUFFile("model.gguf") as f:
        f.architecture, f.metadata["llama.block_count"], f.tensors["token_embd.weight"].data
"""
from oxillama.gguf.constants import GGUFValueType
from oxillama.gguf.reader import GGUFFile, TensorInfo
from oxillama.gguf.writer import GGUFWriter

__all__ = ["GGUFFile", "GGUFValueType", "GGUFWriter", "TensorInfo"]
