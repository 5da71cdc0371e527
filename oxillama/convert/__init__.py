"""Converters into GGUF. `convert_model` / `convert_state_dict` / `convert_hf_dir` take Hugging Face
transformers checkpoints (torch is imported only when a checkpoint needs it)."""
from oxillama.convert.hf import (MODEL_TYPES, HFConverter, convert_hf_dir, convert_model, convert_state_dict,
                                 permute_rope_rows)

__all__ = ["MODEL_TYPES", "HFConverter", "convert_hf_dir", "convert_model", "convert_state_dict",
           "permute_rope_rows"]
