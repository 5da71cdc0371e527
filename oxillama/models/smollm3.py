"""SmolLM3: the llama block (GQA, SwiGLU, RoPE on adjacent pairs) where every 4th layer (il + 1 divisible by 4)
attends without positions (NoPE), as llama.cpp's n_no_rope_layer_step 4."""
from oxillama.models.base import Architecture

NO_ROPE_LAYER_STEP = 4


class SmolLM3(Architecture):
    arch_names = ("smollm3",)

    def rope(self, il: int) -> dict:
        if (il + 1) % NO_ROPE_LAYER_STEP == 0:
            return {"mode": "none"}
        return super().rope(il)
