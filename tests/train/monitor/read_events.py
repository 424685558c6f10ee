#!/usr/bin/python3
"""Reads TensorBoard event files as TensorBoard does and prints them as JSON.

Usage: read_events.py EVENT_FILE

Every record's framing is checked (length, masked CRC-32C of the length and of the data, computed
here independently of the writer), and each payload is parsed with python3-protobuf using
TensorFlow's own message definitions (tensorflow_event.proto beside this script, compiled with
protoc into a temporary folder). Prints {"file_version": ..., "events": [{"step", "wall_time",
"scalars": {tag: value}}]}; exits 1 with a one-line reason on a damaged file.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def load_messages():
    here = os.path.dirname(os.path.abspath(__file__))
    out = tempfile.mkdtemp(prefix="tf-proto-")
    subprocess.run(["protoc", f"--proto_path={here}", f"--python_out={out}", "tensorflow_event.proto"], check=True)
    sys.path.insert(0, out)
    import tensorflow_event_pb2  # noqa: E402  (generated just above)
    return tensorflow_event_pb2


def main() -> int:
    pb = load_messages()
    data = open(sys.argv[1], "rb").read()
    pos, index, result = 0, 0, {"file_version": None, "events": []}
    while pos < len(data):
        if pos + 12 > len(data):
            print(f"record {index}: truncated header at byte {pos}")
            return 1
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked(header):
            print(f"record {index}: length CRC mismatch")
            return 1
        payload = data[pos + 12:pos + 12 + length]
        if len(payload) != length or pos + 16 + length > len(data):
            print(f"record {index}: truncated payload")
            return 1
        (data_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if data_crc != masked(payload):
            print(f"record {index}: data CRC mismatch")
            return 1
        event = pb.Event()
        event.ParseFromString(payload)
        what = event.WhichOneof("what")
        if what == "file_version":
            result["file_version"] = event.file_version
        elif what == "summary":
            scalars = {v.tag: v.simple_value for v in event.summary.value if v.WhichOneof("value") == "simple_value"}
            result["events"].append({"step": event.step, "wall_time": event.wall_time, "scalars": scalars})
        pos += 16 + length
        index += 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
