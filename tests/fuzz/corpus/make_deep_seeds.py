"""Writes the deep-nesting seeds of the fuzzers' corpora (checked in; run
again only to change them): `python3 tests/fuzz/corpus/make_deep_seeds.py`.

Each stays under scripts/test.sh's -max_len (64 KiB), so libFuzzer reads it
whole. Policy files: arrays and objects nested far past the parser's limit,
at the limit, and brackets inside strings. Batches and spool frames: protobuf
groups nested far past protobuf's recursion limit (unknown fields: the only
unbounded nesting the wire format has), bare and inside a valid spool frame.
"""
import pathlib
import struct
import zlib

HERE = pathlib.Path(__file__).parent
DEPTH = 30_000

policy = {
    "deep_arrays.json": '{"castscope_policy": 1, "device": "cpu",\n"ops": ' + "[" * DEPTH + "]" * DEPTH + "}",
    "deep_objects.json": '{"castscope_policy": 1, "device": "cpu", "ops": {}, "description": ' +
                         '{"a": ' * 8_000 + "1" + "}" * 8_000 + "}",
    "deep_unclosed.json": '{"ops": ' + "[{" * DEPTH,
    "at_the_nesting_limit.json": '{"castscope_policy": 1, "device": "cpu", "ops": {"aten::mm": "fp32"}, '
                                 '"description": ' + "[" * 31 + "]" * 31 + "}",
    "brackets_in_strings.json": '{"castscope_policy": 1, "device": "cpu", "description": "' + "[{" * 1000 +
                                '\\"", "ops": {"aten::mm": "fp32"}}',
}
for name, text in policy.items():
    (HERE / "policy" / name).write_text(text)

START_GROUP, END_GROUP = 0x0B, 0x0C  # field 1, wire types 3 and 4
groups = bytes([START_GROUP]) * DEPTH + bytes([END_GROUP]) * DEPTH
(HERE / "batch" / "deep_groups.bin").write_bytes(groups)
frame = struct.pack("<III", 0xC5CA57F0, len(groups), zlib.crc32(groups)) + groups
(HERE / "spool" / "deep_groups_frame.bin").write_bytes(b"CSSPOOL1" + frame)
