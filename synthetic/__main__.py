"""``python -m synthetic [OUT]``: rebuild the synthetic samples and their truth files."""

from __future__ import annotations

import sys
from pathlib import Path

from . import rocpd, rocprof, tpu_multislice
from .gpu import write_samples

if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "sample_traces")
    samples = [*write_samples(out), *rocprof.write_samples(out), *rocpd.write_samples(out)]
    for p in [*samples, *tpu_multislice.write_samples(out)]:
        print(p)
