#!/usr/bin/env python3
"""Compares the machine code of two cubins kernel by kernel: the bytes of
every `.text.<kernel>` section (what runs; line tables and other metadata
are left out). Exit 0 when every kernel of either file is in the
other with the same bytes. Used by scripts/same_kernels.sh.
Usage: kernel_text.py BEFORE.cubin AFTER.cubin"""
import re
import struct
import sys


def kernels(path):
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit(f"{path}: not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    text = {}
    for name_offset, _, _, _, offset, size, *_ in headers:
        name = data[names_at + name_offset:data.index(b"\0", names_at + name_offset)].decode()
        if name.startswith(".text."):
            # Anonymous namespaces are mangled with a hash of the file's path,
            # which differs between two checkouts of the same file.
            kernel = re.sub(r"_GLOBAL__N__[0-9a-f]+_", "_GLOBAL__N__", name[len(".text."):])
            # The tensor-core kernel's BLOCKS parameter (since 1acc339) defaults
            # to 0: that argument names the kernel of the five-argument revisions.
            kernel = re.sub(r"(mla_decode_kernelI(?:Li-?\d+E){5})Li0E(EEvNS_6ParamsE)", r"\1\2", kernel)
            # Since session 27 every tensor-core kernel takes the pool's tensor
            # map as well: the same kernel as the one-parameter revisions'.
            kernel = re.sub(r"(EEvNS_6ParamsE)NS_11KvTensorMapE$", r"\1", kernel)
            text[kernel] = data[offset:offset + size]
    return text


def main():
    before, after = kernels(sys.argv[1]), kernels(sys.argv[2])
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    only_before, only_after = sorted(before.keys() - after.keys()), sorted(after.keys() - before.keys())
    for k in changed:
        print(f"changed: {k} ({len(before[k]) // 16} -> {len(after[k]) // 16} instructions)")
    for k in only_before:
        print(f"gone: {k}")
    for k in only_after:
        print(f"new: {k}")
    same = len(before.keys() & after.keys()) - len(changed)
    print(f"{same} kernels with identical machine code, {len(changed)} changed, "
          f"{len(only_before)} gone, {len(only_after)} new")
    sys.exit(0 if not (changed or only_before or only_after) else 1)


if __name__ == "__main__":
    main()
