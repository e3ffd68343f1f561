"""A deeper target model made from a small one: every transformer block of a GGUF repeated in place.

    python3 tests/gpu/stack_gguf.py SRC.gguf DST.gguf --repeat 4 [--gguf-py DIR]

No larger model of SmolLM2's tokenizer ships on the package registry, and the GPU machine reaches nothing else, so
the drafted campaign (tests/gpu/campaign.sh) serves this stack as its target and the original as its draft: the
target costs about `repeat` times the draft per token (the embeddings are shared, the blocks are not) and its
greedy text stays close enough to the original's that drafts are accepted in part. Block i of the source becomes
blocks i*repeat .. i*repeat+repeat-1 of the stack; every other tensor and every metadata key is copied, with the
block count multiplied. Needs only numpy and llama.cpp's gguf-py (`--gguf-py`: its folder in the llama.cpp tree).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--repeat", type=int, default=4, help="copies of every block (default 4)")
    ap.add_argument("--gguf-py", type=Path, help="llama.cpp's gguf-py folder, when gguf is not installed")
    args = ap.parse_args()
    if args.gguf_py:
        sys.path.insert(0, str(args.gguf_py))
    import gguf  # noqa: PLC0415

    reader = gguf.GGUFReader(args.src)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    count_key = gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)
    blocks = reader.get_field(count_key).contents()
    writer = gguf.GGUFWriter(args.dst, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue   # written by GGUFWriter itself
        value = blocks * args.repeat if field.name == count_key else field.contents()
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)
    stacked = []   # (new name, source tensor)
    for tensor in reader.tensors:
        match = BLOCK.match(tensor.name)
        if not match:
            stacked.append((tensor.name, tensor))
            continue
        index, rest = int(match.group(1)), match.group(2)
        stacked += [(f"blk.{index * args.repeat + k}.{rest}", tensor) for k in range(args.repeat)]
    for name, tensor in stacked:
        writer.add_tensor_info(name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, tensor in stacked:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    print(f"{args.dst}: {arch}, {blocks} -> {blocks * args.repeat} blocks, {len(stacked)} tensors, "
          f"{args.dst.stat().st_size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
