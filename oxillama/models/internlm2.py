"""InternLM2 / 2.5: the llama block (GQA, SwiGLU, RoPE on adjacent pairs); llama.cpp's converter splits the
checkpoint's grouped wqkv into attn_q / attn_k / attn_v, so the file reads as llama's."""
from oxillama.models.base import Architecture


class InternLM2(Architecture):
    arch_names = ("internlm2",)
