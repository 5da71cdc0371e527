"""Tokenizers from GGUF metadata (token ids identical to llama.cpp's) and chat templates."""
from oxillama.tokenizer.builder import Vocab, build_hf_tokenizer, read_vocab
from oxillama.tokenizer.chat import ChatTemplate
from oxillama.tokenizer.streaming import IncrementalDetokenizer
from oxillama.tokenizer.tokenizer import Tokenizer

__all__ = ["Tokenizer", "IncrementalDetokenizer", "ChatTemplate", "Vocab", "read_vocab", "build_hf_tokenizer"]
