"""oxillama: run GGUF large language models on the CPU at C speed, from Python."""
import logging

from oxillama._system import system_info
from oxillama.errors import OxillamaError

logging.getLogger("oxillama").addHandler(logging.NullHandler())

__version__ = "0.1.0"
__all__ = ["OxillamaError", "system_info", "__version__"]
