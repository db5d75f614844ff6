#!/usr/bin/env python3
"""Runs a `helixmla bench` command while nvidia-smi samples the card's SM
clock, power, load and clock-event reasons, and says per suite case what
clock the case ran at. The suite's times are medians over back-to-back
calls; when one case's time moves between runs of the same code (case 2's
queued median has read 485 to 542 us), this tells a clock that fell under
power from a change in the code. The card's settings are only read.

Usage: bench_clocks.py OUT_DIR -- COMMAND...
Writes OUT_DIR/bench.err (the command's stderr, each line prefixed with its
arrival time), OUT_DIR/clocks.csv (the samples) and OUT_DIR/bench-clocks.txt,
one line per case: busy samples, SM clock median and minimum, power maximum,
and the reasons the driver gave for running below the top clock. The
command's stdout passes through. Exit status: the command's. Sampling at
10 Hz through NVML is light, but compare suite numbers across sessions with
the sampler on in both."""
import datetime
import os
import re
import statistics
import subprocess
import sys
import time

FIELDS = "timestamp,clocks.sm,clocks.max.sm,power.draw,utilization.gpu"
# Driver 535 renamed clocks_throttle_reasons to clocks_event_reasons.
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
# The reasons that lower the clock under load (nvidia-smi -q names them).
REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
           0x80: "hw_power_brake"}
BUSY_PERCENT = 50  # samples below this load are the host's work between timings


def benched_gpu(env):
    """The benched device as nvidia-smi's -i names it, or None where it
    cannot be told. helixmla benches CUDA device HELIXMLA_DEVICE (default 0)
    among CUDA_VISIBLE_DEVICES, whose list CUDA reads up to its first empty
    or malformed entry. An index names the same card for both only in PCI
    bus order (nvidia-smi's), which main sets unless the caller chose an
    order; a UUID names it in any order. MIG instances are not sampled:
    their clocks are the parent card's, which the index does not name."""
    try:
        device = int(env.get("HELIXMLA_DEVICE", "0").strip() or "0")
    except ValueError:
        return None  # the bench refuses it
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        entries = [str(device)]
        device = 0
    else:
        entries = []
        for entry in (e.strip() for e in visible.split(",")):
            if not (entry.isdigit() or entry.startswith("GPU-") or entry.startswith("MIG-")):
                break
            entries.append(entry)
    if device < 0 or device >= len(entries):
        return None
    chosen = entries[device]
    if chosen.startswith("MIG-"):
        return None
    if chosen.isdigit() and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return None
    return chosen


def start_sampler(path, gpu):
    """nvidia-smi sampling `gpu` into `path`, or None."""
    if gpu is None:
        return None
    for reason in REASON_FIELDS:
        query = f"--query-gpu={FIELDS},{reason}"
        try:
            probe = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits", "-i", gpu],
                                   capture_output=True, text=True)
        except OSError:
            return None  # no nvidia-smi
        if probe.returncode == 0:
            with open(path, "w") as out:
                out.write(f"{FIELDS},reasons\n")
                out.flush()
                sampler = subprocess.Popen(["nvidia-smi", query, "--format=csv,noheader,nounits", "-i", gpu,
                                            "-lms", "100"], stdout=out, stderr=subprocess.DEVNULL)
            # nvidia-smi takes a moment to its first sample: a short bench
            # (one or two cases) was over before it began.
            deadline = time.time() + 5
            while time.time() < deadline and count_lines(path) < 2:
                time.sleep(0.05)
            return sampler
    return None


def count_lines(path):
    with open(path) as f:
        return sum(1 for _ in f)


def parse_samples(path):
    samples = []
    with open(path) as f:
        lines = f.read().splitlines()[1:]
    for line in lines:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 6:
            continue
        try:
            when = datetime.datetime.strptime(cells[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((when, float(cells[1]), float(cells[2]), float(cells[3]), float(cells[4]),
                            int(cells[5], 16)))
        except ValueError:
            continue  # a line cut short when the sampler stopped, or "[N/A]"
    return samples


def run_bench(command, err_path, env):
    """Runs the bench, stamping each stderr line with its arrival time;
    returns the exit status and the (time, case or None) marks."""
    marks = []
    with open(err_path, "w") as err:
        bench = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
        for line in bench.stderr:
            now = time.time()
            err.write(f"{now:.3f} {line}")
            match = re.match(r"case (\d+) ", line)
            marks.append((now, int(match.group(1)) if match else None))
        status = bench.wait()
    marks.append((time.time(), None))
    # A signal's death (negative here) as a shell reports it.
    return (128 - status if status < 0 else status), marks


def clock_table(samples, marks):
    lines = [f"clocks while each case ran (samples above {BUSY_PERCENT}% load, ~0.1 s apart):",
             f"{'case':>4} {'busy':>5} {'sm MHz median':>13} {'min':>5} {'max clock':>9} {'W max':>6}  "
             "reasons below max"]
    for (begin, case), (end, _) in zip(marks, marks[1:]):
        if case is None:
            continue
        busy = [s for s in samples if begin <= s[0] < end and s[4] >= BUSY_PERCENT]
        if not busy:
            lines.append(f"{case:>4} {0:>5}")
            continue
        clocks = [s[1] for s in busy]
        seen = 0
        for s in busy:
            seen |= s[5]
        reasons = ",".join(name for bit, name in REASONS.items() if seen & bit) or "-"
        lines.append(f"{case:>4} {len(busy):>5} {statistics.median(clocks):>13.0f} {min(clocks):>5.0f} "
                     f"{max(s[2] for s in busy):>9.0f} {max(s[3] for s in busy):>6.0f}  {reasons}")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    out_dir, command = sys.argv[1], sys.argv[3:]
    env = dict(os.environ)
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    gpu = benched_gpu(env)
    sampler = start_sampler(f"{out_dir}/clocks.csv", gpu)
    try:
        status, marks = run_bench(command, f"{out_dir}/bench.err", env)
    except OSError as e:
        print(f"bench_clocks: cannot run {command[0]}: {e.strerror}", file=sys.stderr)
        return 127
    finally:
        if sampler is not None:
            time.sleep(0.3)  # the last samples
            sampler.terminate()
            sampler.wait()
    why = (f"nvidia-smi could not be queried for GPU {gpu}" if gpu is not None else
           "the benched GPU cannot be named for nvidia-smi (HELIXMLA_DEVICE, CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER)")
    table = (f"clocks: {why}; no per-case clocks\n" if sampler is None
             else clock_table(parse_samples(f"{out_dir}/clocks.csv"), marks))
    with open(f"{out_dir}/bench-clocks.txt", "w") as out:
        out.write(table)
    return status


if __name__ == "__main__":
    sys.exit(main())
