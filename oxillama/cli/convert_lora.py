"""`oxillama convert-lora PEFT_DIR --base BASE.gguf -o OUT.gguf`: a Hugging Face PEFT LoRA adapter to GGUF."""
from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("convert-lora", help="convert a Hugging Face PEFT LoRA adapter to GGUF (no torch needed)",
                       description="Convert a PEFT LoRA adapter folder (adapter_config.json + "
                       "adapter_model.safetensors) into llama.cpp's GGUF adapter format for BASE.")
    p.add_argument("peft_dir", help="the PEFT adapter folder")
    p.add_argument("--base", required=True, help="the base model's GGUF file (names, shapes, Q/K layout)")
    p.add_argument("-o", "--output", required=True, help="the GGUF adapter to write")
    p.add_argument("--outtype", choices=("f32", "f16"), default="f32", help="tensor type (default: f32)")
    p.set_defaults(func=run)


def run(args) -> int:
    from oxillama.lora.convert import convert_peft
    print(convert_peft(args.peft_dir, args.base, args.output, outtype=args.outtype))
    return 0
