import numpy as np

def sweep(
    order: np.ndarray,
    floor: np.ndarray,
    stream_pred: np.ndarray,
    trigger: np.ndarray,
    gap: np.ndarray,
    launch_pred: np.ndarray,
    launch_gap: np.ndarray,
    member_lo: np.ndarray,
    member_k: np.ndarray,
    member_order: np.ndarray,
    duration: np.ndarray,
    transfer: np.ndarray,
    zero: np.ndarray | None,
    s: np.ndarray,
    e: np.ndarray,
    max_passes: int,
) -> int: ...
