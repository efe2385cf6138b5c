# Types of the C kernels in _xplane_native.c (built where a C compiler is there; see setup.py).
import numpy as np

OK: int
TRUNCATED_VARINT: int
LONG_VARINT: int
PAST_END: int
FIELD_ZERO: int
BAD_WIRE: int
FULL: int

def field_run(
    data: np.ndarray, first: int, end: int, tag: int, body: np.ndarray, body_end: np.ndarray
) -> tuple[int, int, int]: ...
def events(
    data: np.ndarray,
    body: np.ndarray,
    body_end: np.ndarray,
    req_ids: np.ndarray,
    req_slot: np.ndarray,
    metadata_id: np.ndarray,
    offset_ps: np.ndarray,
    duration_ps: np.ndarray,
    kind: np.ndarray,
    value: np.ndarray,
    vstart: np.ndarray,
    vend: np.ndarray,
) -> tuple[int, int]: ...
def ps_to_ns(
    offset_ps: np.ndarray, duration_ps: np.ndarray, timestamp_ns: int, start_ns: np.ndarray, end_ns: np.ndarray
) -> None: ...
def strings(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]: ...
def varint(data: np.ndarray, pos: int, end: int) -> tuple[int, int]: ...
