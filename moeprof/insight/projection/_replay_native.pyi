import numpy as np

def edges(
    order: np.ndarray,
    device: np.ndarray,
    stream: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    stream_pred: np.ndarray,
    trigger: np.ndarray,
) -> None: ...
def runs(
    order: np.ndarray, join: np.ndarray, node_of: np.ndarray, run_order: np.ndarray, node_lo: np.ndarray
) -> int: ...
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
    cut_of: np.ndarray | None,
    cut: np.ndarray | None,
    s: np.ndarray,
    e: np.ndarray,
    max_passes: int,
) -> int: ...
