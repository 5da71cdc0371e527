"""Test-only: read a GGUF file's metadata into the dict form `oxillama.gguf.GGUFFile.metadata` gives
(scalars as Python values, string arrays as list[str], numeric arrays as numpy arrays).

A small direct parser of the key/value section: the PyPI `gguf` package's reader takes over a minute on a
262k-token vocabulary. Used until oxillama.gguf is available, and as an independent reader afterwards.
"""
import mmap
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_DTYPES = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
           7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}


def read_metadata(path) -> dict:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        _version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        pos = 24
        md = {}

        def read_str(pos):
            (n,) = struct.unpack_from("<Q", buf, pos)
            return buf[pos + 8:pos + 8 + n].decode("utf-8", errors="replace"), pos + 8 + n

        for _ in range(n_kv):
            key, pos = read_str(pos)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            pos += 4
            if vtype == 8:
                md[key], pos = read_str(pos)
            elif vtype == 9:
                itype, n = struct.unpack_from("<IQ", buf, pos)
                pos += 12
                if itype == 8:
                    items = []
                    for _ in range(n):
                        s, pos = read_str(pos)
                        items.append(s)
                    md[key] = items
                else:
                    dtype = np.dtype(_DTYPES[itype])
                    md[key] = np.frombuffer(buf, dtype=dtype, count=n, offset=pos).copy()
                    pos += dtype.itemsize * n
            else:
                fmt = _SCALARS[vtype]
                (md[key],) = struct.unpack_from(fmt, buf, pos)
                pos += struct.calcsize(fmt)
        return md
