"""The package's exception hierarchy. Every error oxillama raises on purpose is an OxillamaError.

Errors about a bad argument value also derive from ValueError, so code written against the
standard library's conventions keeps working.
"""


class OxillamaError(Exception):
    """Root of every exception oxillama raises on purpose."""


class InvalidArgumentError(OxillamaError, ValueError):
    """An argument has the wrong value, shape, dtype or type."""


class QuantError(InvalidArgumentError):
    """Bad input to a quantization kernel: unknown type, wrong byte length, bad shape or dtype."""


class GGUFError(OxillamaError, ValueError):
    """A GGUF file is malformed, truncated or unsupported."""


class TokenizerError(OxillamaError):
    """The tokenizer could not be built from the model's metadata, or was used wrongly."""


class ChatTemplateError(TokenizerError):
    """A chat template is missing, fails to render, or tried to leave its sandbox."""


class ModelError(OxillamaError):
    """A model's metadata or weights are inconsistent with its architecture."""


class UnsupportedArchitectureError(ModelError):
    """The GGUF file's architecture is not one oxillama implements."""


class InsufficientMemoryError(OxillamaError, MemoryError):
    """An allocation (a KV cache) would not fit in the memory available."""


class ContextOverflowError(OxillamaError):
    """A prompt or a generation would pass the context size n_ctx."""


class SamplerError(InvalidArgumentError):
    """Invalid sampling parameters or logits."""


class GrammarError(OxillamaError, ValueError):
    """A grammar or JSON schema is invalid or unsupported."""


class SnapshotError(OxillamaError):
    """A session snapshot is malformed, from another model, or from an unsupported version."""


class SnapshotWriteError(SnapshotError, OSError):
    """A snapshot could not be written to the path given (also an OSError, with its errno and filename)."""


class ModelNotFoundError(OxillamaError, ValueError):
    """A model file does not exist (a ValueError, as llama-cpp-python raises for a missing model_path)."""


class DownloadError(OxillamaError):
    """A model could not be fetched or failed verification."""


class BatchError(OxillamaError):
    """A multi-sequence operation cannot proceed: no free sequence slot, a full queue, a stopped scheduler."""


class KVPoolExhaustedError(BatchError):
    """The shared KV pool has too few free pages for the step."""


class QueueFullError(BatchError):
    """The scheduler's queue already holds max_queue waiting requests."""


class SchedulerStoppedError(BatchError):
    """The scheduler is not running."""


class LoraError(OxillamaError, ValueError):
    """A LoRA adapter is malformed or does not fit the base model."""
