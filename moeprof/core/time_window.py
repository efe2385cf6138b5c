"""The window of times moeprof accepts (docs/metrics.md, "Times moeprof accepts").

Plain constants, no imports: the wire decoder reads them without loading the event table's libraries.
"""

from __future__ import annotations

__all__ = ["MAX_DURATION_NS", "TIME_LIMIT_NS", "TOTAL_LIMIT_NS", "UNPLACEABLE_NS"]

# A device activity is placed only when both its end points lie in [0, 2^62) ns of the trace clock (146 years
# from its zero: epoch-based clocks are at ~1.8e18 ns, session clocks start at 0) and it lasts 0 to 1 day.
# Then every difference of two times fits int64, no time reported is negative, and every sum the figures add
# up fits too (a file is refused past TOTAL_LIMIT_NS). The converters map what no int64 holds past +-2^62.
TIME_LIMIT_NS = 2**62
MAX_DURATION_NS = 86_400 * 10**9
TOTAL_LIMIT_NS = 2**62
# what a converter writes for a time no int64 nanosecond holds (NaN, inf, 1e300 µs): outside the window
UNPLACEABLE_NS = -(2**63)  # int64 min
