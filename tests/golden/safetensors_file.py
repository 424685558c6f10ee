"""The safetensors layout, written with json + struct so the golden-file makers need no extra
package: an 8-byte little-endian header length, the JSON header (padded with spaces so the data
starts 8-byte aligned), then the tensors' bytes in the order given."""
import json
import struct


def write(path, tensors, metadata):
    """tensors: (name, dtype name such as "F32", shape, little-endian bytes), in file order.
    Returns the number of bytes of tensor data written."""
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in tensors:
            f.write(data)
    return offset
