#!/usr/bin/env python3
"""For each kernel in a `cuobjdump -sass` listing, its longest backward branch
(the KV loop of an attention kernel): start and end address, the start's
offset within a 128-byte line, and the loop's length in instructions. Used to
compare builds whose loops measured differently (docs/NOTES.md; the offset
was ruled out as a cause in session 10, the length is what gpu-check prints).
Usage: sass_loops.py LISTING.sass"""
import re
import sys


def main():
    current, loops = None, {}
    with open(sys.argv[1]) as listing:
        for line in listing:
            name = re.match(r"\s*Function : (\S+)", line)
            if name:
                current = name.group(1)
                continue
            inst = re.match(r"\s*/\*([0-9a-f]+)\*/\s*(.*?)\s*;", line)
            if not (inst and current):
                continue
            branch = re.search(r"BRA (0x[0-9a-f]+)", inst.group(2))
            if not branch:
                continue
            at, target = int(inst.group(1), 16), int(branch.group(1), 16)
            if target < at and (current not in loops or at - target > loops[current][1] - loops[current][0]):
                loops[current] = (target, at)
    for kernel, (start, end) in sorted(loops.items()):
        print(f"{kernel[:90]:<90} loop 0x{start:05x}-0x{end:05x}  start mod 128 = {start % 128:3d}  ({(end - start) // 16} instructions)")


if __name__ == "__main__":
    main()
