"""Write tests/gguf/goldens/<model>.json: what llama.cpp's own GGUF reader (the PyPI `gguf`
package) sees in the two real models, so the test suite can check GGUFFile against it without
needing `gguf` (whose reader takes about a minute on the Gemma vocabulary).

    python tests/gguf/make_goldens.py
"""
import hashlib
import importlib.metadata
import json
import os
import sys

import gguf
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from oxillama import hub  # noqa: E402

MODELS = {"smollm2-135m": "smollm2.json", "gemma3-270m": "gemma3.json"}


def digest_strings(strings) -> str:
    h = hashlib.sha256()
    for s in strings:
        h.update(len(s).to_bytes(8, "little"))
        h.update(s)
    return h.hexdigest()


def summarize(path: str) -> dict:
    r = gguf.GGUFReader(path)
    metadata = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        vtype = int(field.types[0])
        entry = {"type": vtype}
        if vtype == gguf.GGUFValueType.ARRAY:
            etype = int(field.types[1])
            entry["element_type"] = etype
            entry["length"] = len(field.data)
            if etype == gguf.GGUFValueType.STRING:
                entry["sha256"] = digest_strings(bytes(field.parts[i]) for i in field.data)
            else:
                arr = np.concatenate([field.parts[i] for i in field.data]) if field.data else np.zeros(0)
                entry["sha256"] = hashlib.sha256(arr.astype(arr.dtype.newbyteorder("<")).tobytes()).hexdigest()
        elif vtype == gguf.GGUFValueType.STRING:
            entry["value"] = bytes(field.parts[-1]).decode("utf-8")
        else:
            entry["value"] = field.parts[-1][0].item()
        metadata[name] = entry
    tensors = [{"name": t.name, "type": int(t.tensor_type), "ggml_shape": [int(d) for d in t.shape],
                "offset": int(t.data_offset), "nbytes": int(t.n_bytes)} for t in r.tensors]
    return {"gguf_package_version": importlib.metadata.version("gguf"), "file_size": os.path.getsize(path),
            "data_offset": int(r.data_offset), "metadata": metadata, "tensors": tensors}


def main() -> None:
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens")
    for model, fname in MODELS.items():
        path = str(hub.pull(model, progress=False))
        with open(os.path.join(out_dir, fname), "w") as f:
            json.dump(summarize(path), f, indent=0, ensure_ascii=False)
            f.write("\n")
        print("wrote", fname)


if __name__ == "__main__":
    main()
