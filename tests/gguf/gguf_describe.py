"""A GGUF file as the tests compare it: every key-value (a long array as
its length and the sha256 of its JSON) and every tensor (name, shape in
GGUF order, type, the sha256 of its bytes). Shared by
tests/fixtures/gen_gguf.py (on the converter's file) and tests/gguf/check.py
(on tacod's)."""
import hashlib
import json


def describe(path, reader):
    """reader: gguf's GGUFReader class (the caller's gguf package)."""
    r = reader(path)
    kv = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        if isinstance(v, list) and len(v) > 8:
            v = {"len": len(v), "sha256": hashlib.sha256(
                json.dumps(v, ensure_ascii=False).encode()).hexdigest()}
        kv[k] = v
    tensors = [[t.name, [int(d) for d in t.shape], t.tensor_type.name,
                hashlib.sha256(bytes(t.data.tobytes())).hexdigest()]
               for t in r.tensors]
    return {"kv": kv, "tensors": tensors}
