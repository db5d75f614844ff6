"""Shared-memory wavefronts of the 16-row fp8 mma.sync kernel's fragment
loads (decode_tile: K 8-byte loads of rows g and g + 8, the rope's 4-byte
loads, V 8-byte loads of rows 2 c4, 2 c4 + 1, + 8, + 9) for a placement of
the tile's fp8 rows, by a bank model: 32 banks of 4 bytes, 8-byte loads
served a half-warp at a time, 4-byte loads a warp at a time, a wavefront
per distinct word a bank holds. The ideal is 2 for the 8-byte loads (256
bytes), 1 for the 4-byte ones. Session 23 used it to place unswizzled rows
(whole-row copies cannot swizzle): 592 r - 16 (r % 2) is ideal for K and V.
Usage: python3 scripts/probes/fp8_fragment_banks.py"""


def row_offset(r, placement):
    return {
        "592r-16(r%2)": 592 * r - 16 * (r & 1),
        "592r": 592 * r,
        "608r": 608 * r,
    }[placement]


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


def main():
    for placement in ("592r-16(r%2)", "592r", "608r"):
        counts = {}
        for s_wn in (0, 1):
            for chunk in range(0, 32, 2):  # a latent pair of 16-byte chunks
                for plus in (0, 8):
                    a = [row_offset(s_wn * 16 + (l >> 2) + plus, placement) + 16 * (chunk + ((l & 3) >> 1)) + 8 * (l & 1)
                         for l in range(32)]
                    counts.setdefault("K", []).append(wavefronts(a, 8, True))
            for step in range(4):
                for plus in (0, 8):
                    a = [row_offset(s_wn * 16 + (l >> 2) + plus, placement) + 512 + 16 * step + 4 * (l & 3)
                         for l in range(32)]
                    counts.setdefault("rope", []).append(wavefronts(a, 4, False))
        for kk in (0, 1):
            for warp in range(8):
                for plus in (0, 1, 8, 9):
                    a = [row_offset(kk * 16 + 2 * (l & 3) + plus, placement) + (4 * warp + ((l >> 2) >> 1)) * 16
                         + 8 * ((l >> 2) & 1) for l in range(32)]
                    counts.setdefault("V", []).append(wavefronts(a, 8, True))
        print(placement, {k: max(v) for k, v in counts.items()})


if __name__ == "__main__":
    main()
