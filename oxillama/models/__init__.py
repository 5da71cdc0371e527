"""Model architectures, one module per family. `architecture_for(gguf)` picks the family class."""
from __future__ import annotations

from oxillama.errors import UnsupportedArchitectureError
from oxillama.models.base import Architecture, ModelConfig
from oxillama.models.bert import Bert, NomicBert
from oxillama.models.bloom import Bloom
from oxillama.models.command_r import CommandR
from oxillama.models.exaone import Exaone
from oxillama.models.falcon import Falcon
from oxillama.models.gemma import Gemma, Gemma2, Gemma3
from oxillama.models.gpt2 import GPT2
from oxillama.models.gpt_oss import GptOss
from oxillama.models.gptneox import GPTNeoX
from oxillama.models.granite import Granite, GraniteHybrid
from oxillama.models.internlm2 import InternLM2
from oxillama.models.lfm2 import Lfm2
from oxillama.models.lfm2moe import Lfm2Moe
from oxillama.models.llama import Llama
from oxillama.models.mamba2 import Mamba2
from oxillama.models.nemotron_h import NemotronH
from oxillama.models.moe import OLMoE, PhiMoe, Qwen2Moe, Qwen3Moe
from oxillama.models.olmo2 import OLMo2
from oxillama.models.phi3 import Phi3
from oxillama.models.qwen2 import Qwen2
from oxillama.models.qwen3 import Qwen3
from oxillama.models.qwen35 import Qwen35, Qwen35Moe
from oxillama.models.qwen3next import Qwen3Next
from oxillama.models.smollm3 import SmolLM3
from oxillama.models.stablelm import StableLM
from oxillama.models.starcoder2 import StarCoder2

FAMILIES: tuple[type[Architecture], ...] = (Llama, Qwen2, Qwen3, Gemma, Gemma2, Gemma3, Phi3, StarCoder2, CommandR,
                                            Qwen3Moe, Qwen2Moe, OLMoE, PhiMoe, GptOss, Mamba2,
                                            GraniteHybrid,
                                            StableLM, GPTNeoX, Bloom, Falcon, GPT2, OLMo2, Granite, SmolLM3, Exaone,
                                            InternLM2, Lfm2, Lfm2Moe, Qwen3Next, Qwen35, Qwen35Moe, NemotronH,
                                            Bert, NomicBert)
ARCHITECTURES: dict[str, type[Architecture]] = {name: cls for cls in FAMILIES for name in cls.arch_names}

__all__ = ["ARCHITECTURES", "Architecture", "ModelConfig", "architecture_for"]


def architecture_for(gguf) -> Architecture:
    arch = gguf.architecture
    cls = ARCHITECTURES.get(arch or "")
    if cls is None:
        raise UnsupportedArchitectureError(
            f"architecture {arch!r} is not supported; supported: {', '.join(sorted(ARCHITECTURES))}")
    return cls(gguf)
