"""Make tests/quant/goldens/quantize.json from llama.cpp's quantizers (run once; needs llama-cpp-python
0.3.36, or OXILLAMA_LLAMA_CPP_LIB pointing at a folder with its libllama.so and libggml-base.so).

    python tests/quant/make_goldens_quantize.py

blocks: sha256 of ggml_quantize_chunk's output for block_data() per type, without and with
importance weights. files: for each case of CASES, llama_model_quantize's output for
model_files.make_f16_llama's model: the tensor names in file order, their types and the first 12
hex digits of each tensor's sha256. test_quantize_file.py checks oxillama against these, and
against llama.cpp directly when it is installed.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import numpy as np  # noqa: E402

GOLDENS = os.path.join(HERE, "goldens", "quantize.json")
BLOCK_TYPES = ("F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
               "IQ4_NL", "IQ4_XS", "Q1_0", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4")
# "FTYPE" or "FTYPE:option": imx (the test imatrix), pure, types (--output-tensor-type Q8_0
# --token-embedding-type Q4_K)
CASES = ("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S",
         "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "Q4_K_M:imx", "Q2_K_S:imx", "IQ4_XS:imx",
         "Q4_0:imx", "Q3_K_M:imx", "Q5_K_S:imx", "Q4_K_M:pure", "Q4_K_M:types",
         "Q1_0", "TQ1_0", "TQ2_0", "MXFP4_MOE", "Q1_0:pure", "TQ1_0:pure", "MXFP4_MOE:pure")


def block_data(cols: int) -> tuple[np.ndarray, np.ndarray]:
    """16 rows of weights-like values (row scales over 3 decades, outliers, zeros, an all-zero start)
    and positive importance weights for them."""
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((16, cols)).astype(np.float32)
    x *= np.exp(rng.uniform(-4, 2, size=(16, 1))).astype(np.float32)
    x[rng.random((16, cols)) < 0.01] *= 8
    x[rng.random((16, cols)) < 0.01] = 0
    x[0, :64] = 0
    w = np.exp(rng.normal(0, 1.5, cols)).astype(np.float32)
    return x, w


def sha(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


def case_kwargs(case: str, imatrix_path: str) -> tuple[str, dict]:
    ft, _, opt = case.partition(":")
    kw = {"imx": {"imatrix": imatrix_path}, "pure": {"pure": True},
          "types": {"output_tensor_type": "Q8_0", "token_embedding_type": "Q4_K"}, "": {}}[opt]
    return ft, kw


def file_summary(path: str) -> dict:
    """names, types and sha256 prefixes of a file's tensors, each a comma-joined string (compact)."""
    from oxillama.gguf import GGUFFile
    with GGUFFile(path) as f:
        return {"names": ",".join(f.tensors), "types": ",".join(t.qtype for t in f.tensors.values()),
                "sha256": ",".join(sha(t.data)[:12] for t in f.tensors.values())}


def main() -> None:
    import llama_cpp_ref as ref
    import model_files as mf
    from oxillama.quant import GGMLType, recipes
    from oxillama.quant.imatrix import load_imatrix
    if not ref.available():
        sys.exit("llama-cpp-python (or OXILLAMA_LLAMA_CPP_LIB) is needed to make these goldens")
    out = {"blocks": {}, "files": {}}
    for name in BLOCK_TYPES:
        for cols in (256, 512):
            x, w = block_data(cols)
            out["blocks"][f"{name}/{cols}"] = sha(ref.ggml_quantize(int(GGMLType[name]), x))
            out["blocks"][f"{name}/{cols}/imatrix"] = sha(ref.ggml_quantize(int(GGMLType[name]), x, w))
    with tempfile.TemporaryDirectory() as tmp:
        src = mf.make_f16_llama(os.path.join(tmp, "f16.gguf"))
        imx = mf.make_imatrix(os.path.join(tmp, "imatrix.gguf"))
        values = load_imatrix(imx).values()
        for case in CASES:
            ft, kw = case_kwargs(case, imx)
            dst = os.path.join(tmp, "out.gguf")
            ref.llama_quantize(src, dst, recipes.file_type(ft).ftype, imatrix=values if "imatrix" in kw else None,
                               pure=kw.get("pure", False),
                               output_tensor_type=int(GGMLType[kw["output_tensor_type"]]) if "output_tensor_type" in kw else None,
                               token_embedding_type=int(GGMLType[kw["token_embedding_type"]]) if "token_embedding_type" in kw else None)
            summary = file_summary(dst)
            out["names"] = summary.pop("names")    # the same order in every case (llama.cpp's)
            out["files"][case] = summary
            os.unlink(dst)
    os.makedirs(os.path.dirname(GOLDENS), exist_ok=True)
    with open(GOLDENS, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {GOLDENS}: {len(out['blocks'])} block hashes, {len(out['files'])} files")


if __name__ == "__main__":
    main()
