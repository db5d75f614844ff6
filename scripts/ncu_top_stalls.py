#!/usr/bin/env python3
"""Prints the SASS lines of an Nsight Compute source page (CSV) with the most
warp-stall samples, so a device run can bring back where a kernel waits
without the whole report.  Usage: ncu_top_stalls.py SOURCE.csv [LINES]"""
import csv
import sys


def main():
    path = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    header_at = next(i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r))
    header = rows[header_at]
    samples = next(i for i, c in enumerate(header) if c.startswith("Warp Stall Sampling (All"))
    source = next(i for i, c in enumerate(header) if c == "Source")
    address = next((i for i, c in enumerate(header) if c == "Address"), None)

    def count(r):
        try:
            return float(r[samples].replace(",", ""))
        except (ValueError, IndexError):
            return 0.0

    body = [r for r in rows[header_at + 1:] if len(r) > samples]
    total = sum(count(r) for r in body) or 1.0
    print(f"{len(body)} SASS lines, {total:.0f} stall samples; top {limit}:")
    for r in sorted(body, key=count, reverse=True)[:limit]:
        where = r[address] if address is not None else ""
        print(f"{100 * count(r) / total:5.1f}% {where:>6} {r[source][:110]}")


if __name__ == "__main__":
    main()
