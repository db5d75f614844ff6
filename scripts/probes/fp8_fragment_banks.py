"""Shared-memory wavefronts of the 16-row fp8 mma.sync kernel's fragment
loads (decode_tile: K 8-byte loads of S columns g and g + 8, the rope's
4-byte loads, V 8-byte loads of P columns 2 c4, 2 c4 + 1, + 8, + 9) for a
tile layout, by a bank model: 32 banks of 4 bytes, 8-byte loads served a
half-warp at a time, 4-byte loads a warp at a time, a wavefront per
distinct word a bank holds. The ideal is 2 for the 8-byte loads (256
bytes), 1 for the 4-byte ones. A layout is where chunk c of row r sits and
which row S's column j reads (P's column j is the same row). Session 23:
unswizzled whole rows at 592 r - 16 (r % 2), and the 128-byte swizzle of a
tensor copy with S's rows permuted 0 2 4 6 3 1 7 5, are ideal for K and V.
Usage: python3 scripts/probes/fp8_fragment_banks.py"""

PERMUTED = [0, 2, 4, 6, 3, 1, 7, 5]

LAYOUTS = {
    # name: (offset of chunk c of row r, row of S column j)
    "640-byte rows, XOR swizzle (main)": (
        lambda r, c: r * 640 + (c >> 3) * 128 + (((c & 7) ^ ((r ^ ((r & 1) << 2)) & 7)) << 4), lambda j: j),
    "rows at 592 r - 16 (r % 2)": (lambda r, c: 592 * r - 16 * (r & 1) + 16 * c, lambda j: j),
    "rows at 592 r": (lambda r, c: 592 * r + 16 * c, lambda j: j),
    "128-byte swizzle, rows in order": (lambda r, c: (c >> 3) * 4096 + r * 128 + (((c & 7) ^ (r & 7)) << 4),
                                        lambda j: j),
    "128-byte swizzle, rows 0 2 4 6 3 1 7 5": (
        lambda r, c: (c >> 3) * 4096 + r * 128 + (((c & 7) ^ (r & 7)) << 4), lambda j: (j & ~7) | PERMUTED[j & 7]),
}


def wavefronts(addresses, width, halves):
    lanes = [range(0, 16), range(16, 32)] if halves else [range(32)]
    total = 0
    for group in lanes:
        words_of_bank = {}
        for lane in group:
            for w in range(width // 4):
                word = addresses[lane] // 4 + w
                words_of_bank.setdefault(word % 32, set()).add(word)
        total += max(len(words) for words in words_of_bank.values())
    return total


def worst(chunk_at, row_of):
    at = lambda j, c, byte: chunk_at(row_of(j), c) + byte  # S/P column j, chunk c, byte in chunk
    counts = {"K": [], "rope": [], "V": []}
    for s_wn in (0, 1):
        for chunk in range(0, 32, 2):  # a latent pair of 16-byte chunks
            for nt in (0, 1):
                a = [at(s_wn * 16 + nt * 8 + (l >> 2), chunk + ((l & 3) >> 1), 8 * (l & 1)) for l in range(32)]
                counts["K"].append(wavefronts(a, 8, True))
        for step in range(4):
            for nt in (0, 1):
                a = [at(s_wn * 16 + nt * 8 + (l >> 2), 32 + step, 4 * (l & 3)) for l in range(32)]
                counts["rope"].append(wavefronts(a, 4, False))
    for kk in (0, 1):
        for warp in range(8):
            for plus in (0, 1, 8, 9):
                a = [at(kk * 16 + 2 * (l & 3) + plus, 4 * warp + ((l >> 2) >> 1), 8 * ((l >> 2) & 1)) for l in range(32)]
                counts["V"].append(wavefronts(a, 8, True))
    return {kind: max(v) for kind, v in counts.items()}


if __name__ == "__main__":
    for name, (chunk_at, row_of) in LAYOUTS.items():
        print(f"{name:42s} {worst(chunk_at, row_of)}")
