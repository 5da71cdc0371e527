"""GGUF files: a validating, zero-copy reader (GGUFFile) and a writer (GGUFWriter).

    with GGUFFile("model.gguf") as f:           # GGUFError for any malformed or truncated file
        f.architecture, f.metadata["llama.block_count"]
        t = f.tensors["token_embd.weight"]      # .shape (row-major), .qtype, .nbytes, .data (uint8 view)

    w = GGUFWriter("out.gguf")
    w.add_metadata("general.architecture", "llama")
    w.add_tensor("token_embd.weight", weights, qtype="Q8_0")
    w.write()                                   # atomic: temporary file, then rename
"""
from oxillama.gguf.constants import GGUFValueType
from oxillama.gguf.reader import GGUFFile, TensorInfo
from oxillama.gguf.strings import StringArray
from oxillama.gguf.writer import GGUFWriter

__all__ = ["GGUFFile", "GGUFValueType", "GGUFWriter", "StringArray", "TensorInfo"]
