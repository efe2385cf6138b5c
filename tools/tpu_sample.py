"""Write sample_traces/tpu_v5e_demo/runsc.xplane.pb from a real TPU capture: its planes copied byte for byte,
less the HLO protos of ``/host:metadata`` (822 KB of the 1.45 MB), so a fresh clone reads a real TPU trace.

python tools/tpu_sample.py ../shared/traces/tpu/demo_v5e_1chip.xplane.pb sample_traces/tpu_v5e_demo/runsc.xplane.pb

An output named ``*.gz`` is gzipped (no name, no time in its header: the same bytes each time); the readers
take XPlanes uncompressed, so a test decompresses it first (sample_traces/tpu_v5e_moe_step).

Only whole top-level fields of the XSpace are copied (a protobuf message is the concatenation of its fields):
the bytes of every plane kept are the capture's own.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

from moeprof.readers.xspace_proto import iter_fields, length_delimited_prefix

DROPPED = "/host:metadata"


def main(source: Path, out: Path) -> None:
    data = source.read_bytes()
    kept = bytearray()
    head = 0  # fields follow one another: each begins (its key, its length) where the one before ended
    for number, wire, start, end in iter_fields(data):
        if not (number == 1 and wire == 2 and length_delimited_prefix(data[start:end], 2) == DROPPED):
            kept += data[head:end]
        head = end
    out.parent.mkdir(parents=True, exist_ok=True)
    written = gzip.compress(bytes(kept), compresslevel=9, mtime=0) if out.suffix == ".gz" else bytes(kept)
    out.write_bytes(written)
    print(f"{out}: {len(written):,} bytes (from {len(data):,})")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
