"""What a compiled MoE program says of its dimensions and of each op's arrays (the routing terms' evidence).

The routing terms (``top_k``, ``capacity``, ``experts``) and ``tokens`` change the model's dimensions; what
that does to each op is read from the program's HLO (the XPlane's ``/host:metadata``), once per distinct
(HLO module, program, op), in the per-file map: the replay's ``program`` and ``shapes`` columns, each a small
JSON string (categorical: a row holds its code). :mod:`.resize` turns them into new durations.

**The program** (:class:`Program`):

* ``T``: the batch's tokens (:func:`batch_of`, the ``tokens`` term's);
* the routed experts' grouped GEMMs (a ragged dot: XLA's ``ragged-dot`` or the TPU's Mosaic kernel): their
  rows ``R`` (the rows they see: ``k·T`` dropless, ``E·C`` padded to capacity), their groups ``E`` (the
  weights' leading dimension) and, where the kernel takes its tile schedule as an operand (the TPU's
  ``s32[R/tm + E − 1]``), the tile's rows ``tm``;
* ``k``: ``R / T`` in a dropless program (per device: ``R / (D·T)``); in a padded one, the assignments' rows
  over ``T`` (the index arrays of the dispatch, ``s32[k·T]``);
* ``capacity``: the experts' groups are a broadcast of one value (``jnp.full``: every expert the same rows),
  not computed from the routing: a program padded to capacity ``C = R / E`` rows per expert;
* the on-chip evidence: per size (a power of two, ±√2), how many of the program's arrays XLA's memory-space
  assignment placed in on-chip memory (layout ``S(1)``: a TPU's VMEM) and the largest so placed; the largest
  table of a row gather so placed; the chip's HBM bandwidth (the device plane's
  ``peak_hbm_bw_gigabytes_per_second``).

**An op** (:func:`op_facts`): its kind (:data:`KINDS`) and its arrays (result's, then operands'), each with
its bytes, whether it is on chip, and the dimensions it carries (:data:`ROLES`).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import orjson
import pandas as pd

from ....core.events import combine_codes, first_rows, lookup
from ....core.hlo import HloInstruction, HloModule, shape_bytes, shape_dims
from ....core.metrics import EventColumns
from ....core.trace import Trace
from ....core.vocabulary import vocabulary

# what an op is to the cost model (:mod:`.resize`)
KINDS = (
    "grouped",  # the routed experts' grouped GEMM (ragged dot), or its weight gradient ([E, K, N] from the rows)
    "matmul",  # a dot, convolution, a fusion holding one: FLOPs scale with its arrays
    "gather",  # a row gather (nothing else but data movement): its table's reads and its result's writes
    "move",  # data movement only (copies, slices, one-chip collectives): its time follows its HBM bytes
    "async",  # the memory-space assignment's own prefetch/eviction (copy-start/-done): moves with what fits
    "other",  # anything else (elementwise, reductions, scatters, sorts, collectives between chips): its bytes
)
# the dimensions an array carries, one letter each
ROLES = {
    "t": "the tokens (a dimension, or consecutive ones, a multiple of T)",
    "r": "the routed rows (k·T, the experts' rows; the k copies of each token)",
    "k": "the k copies of each token as a dimension of their own ([T, k, ...])",
    "c": "the experts' buffers padded to capacity (E·C rows)",
    "e": "the experts (a leading or trailing dimension E)",
    "g": "the grouped GEMM's tile schedule (R/tm + E − 1) or group offsets (E + 1)",
    "s": "a state parameter's shape (weights, optimizer moments)",
}
ON_CHIP = "S(1)"  # the layout's memory space 1: a TPU's on-chip memory (VMEM)
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\](?:\{([^}]*)\})?")
_NO_WORK = frozenset({"bitcast", "get-tuple-element", "tuple", "parameter", "constant"})
_PASS_THROUGH = frozenset({"bitcast", "get-tuple-element", "copy-start", "copy-done", "copy"})
_MOVEMENT = frozenset({"gather", "dynamic-slice", "dynamic-update-slice", "slice", "concatenate", "copy", "transpose"})
_ARITHMETIC = frozenset(
    {
        "scatter",
        "reduce",
        "dot",
        "convolution",
        "ragged-dot",
        "multiply",
        "add",
        "subtract",
        "divide",
        "exponential",
        "tanh",
        "logistic",
        "rsqrt",
        "sqrt",
        "power",
        "maximum",
        "minimum",
        "sort",
        "select-and-scatter",
        "reduce-window",
    }
)
_MATMUL_OPCODES = frozenset({"dot", "convolution", "ragged-dot"})
# the parts of an MoE layer that see each token once, whatever k: its router (gate) and a shared expert
_NOT_ROUTED = re.compile(r"(?i)router|\bgate\b|shared")
_LAYOUT = frozenset({"copy", "reshape", "transpose", "convert", "bitcast", "broadcast"})
_PLUMBING = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast"})


@dataclass(frozen=True)
class Array:
    """One array of an op."""

    dims: tuple[int, ...]
    bytes: int
    on_chip: bool


def arrays_of(shape: str) -> list[Array]:
    """The arrays of an HLO shape (a tuple's elements in order), with their memory space."""
    out = []
    for dtype, dims, layout in _ARRAY.findall(shape):
        sizes = tuple(int(x) for x in dims.split(",") if x)
        nbytes = shape_bytes(f"{dtype}[{dims}]")
        if nbytes or not math.prod(sizes):  # an element type without a size (a token) is no array
            out.append(Array(sizes, nbytes, ON_CHIP in (layout or "")))
    return out


def size_bucket(nbytes: float) -> int:
    """The power of two nearest a size in MiB (the on-chip evidence is counted per bucket)."""
    return round(math.log2(max(nbytes, 1.0) / 2**20))


@dataclass
class Program:
    """What one compiled program says of its MoE dimensions and its on-chip memory (JSON in the ``program``
    column)."""

    tokens: int = 0  # T
    rows: int = 0  # R: the routed experts' rows (0: no grouped GEMM found)
    experts: int = 0  # E: the grouped GEMM's groups
    tile_rows: float = 0.0  # tm (0: the kernel takes no tile schedule)
    tiles: int = 0  # the tile schedule's length, R/tm + E - 1
    top_k: float = 0.0  # k (0: unknown)
    capacity: int = 0  # C: rows per expert of a program padded to capacity (0: dropless)
    devices: int = 1
    on_chip: dict[str, list[int]] = field(default_factory=dict)  # size bucket -> [arrays on chip, arrays]
    largest_on_chip: int = 0  # bytes
    gather_table_on_chip: int = 0  # the largest row gather table held on chip, bytes
    hbm_bytes_per_s: float = 0.0  # 0: unknown

    def to_json(self) -> str:
        return orjson.dumps(asdict(self)).decode()

    @classmethod
    def from_json(cls, text: str) -> Program:
        return cls(**orjson.loads(text)) if text else cls()

    @property
    def capacity_factor(self) -> float:
        """The capacity factor of a padded program (C·E / (k·T)); 0 where dropless or unknown."""
        if not (self.capacity and self.top_k and self.tokens):
            return 0.0
        return self.capacity * self.experts / (self.top_k * self.tokens)

    def on_chip_share(self, nbytes: float) -> float:
        """The chance that an array of ``nbytes`` sits on chip: the share of the program's arrays of that size
        (the nearest size it has one of) that XLA placed there; 0 above the largest it placed there."""
        if nbytes > self.largest_on_chip or not self.on_chip:
            return 0.0
        want = size_bucket(nbytes)
        nearest = min(self.on_chip, key=lambda b: (abs(int(b) - want), -int(b)))
        on, count = self.on_chip[nearest]
        return on / count if count else 0.0

    def ok(self) -> bool:
        return bool(self.tokens and self.rows and self.experts)


@dataclass(frozen=True)
class OpArray:
    """One array of an op as the resize sees it."""

    bytes: int
    roles: str  # letters of ROLES
    on_chip: bool
    result: bool  # the op's result (else an operand)
    dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class OpFacts:
    """One op's kind and arrays (JSON in the ``shapes`` column)."""

    kind: str
    arrays: tuple[OpArray, ...]
    table: int = -1  # a gather's table: its index in arrays
    single_copy: str = ""  # what the op becomes at k = 1: "gone" (a relayout or sum over the k copies), ""
    # a scatter into an HBM buffer: its updates' rows and the buffer's row bytes (each update reads and writes
    # one row at random in HBM: the evidence of what a random row access costs there); 0 otherwise
    scatter_rows: int = 0
    row_bytes: int = 0  # a gather's table rows, a scatter's buffer rows: bytes each

    def to_json(self) -> str:
        return orjson.dumps(
            {
                "kind": self.kind,
                "a": [[a.bytes, a.roles, int(a.on_chip), int(a.result), list(a.dims)] for a in self.arrays],
                "table": self.table,
                "k1": self.single_copy,
                "scatter": self.scatter_rows,
                "row": self.row_bytes,
            }
        ).decode()

    @classmethod
    def from_json(cls, text: str) -> OpFacts | None:
        if not text:
            return None
        raw = orjson.loads(text)
        arrays = tuple(OpArray(int(b), str(r), bool(c), bool(res), tuple(d)) for b, r, c, res, d in raw["a"])
        return cls(raw["kind"], arrays, int(raw["table"]), str(raw["k1"]), int(raw["scatter"]), int(raw["row"]))


# ---------------------------------------------------------------- the batch (the tokens term's, and every term's T)


@dataclass(frozen=True)
class Batch:
    """What a program's HLO says of its batch."""

    tokens: int  # T: the batch inputs' leading dimension (0: no batch input found)
    inputs: tuple[str, ...]  # the batch inputs, "x.1 f32[16384,2048]"
    state: frozenset[tuple[int, ...]]  # the state parameters' dimensions, sorted (not scalars)
    shared: tuple[int, ...]  # dimensions of the state that are multiples of T (the selection is then ambiguous)

    @property
    def text(self) -> str:
        """The batch in words (the projection's note says it), "" where none was found."""
        if not self.tokens:
            return ""
        inputs = ", ".join(self.inputs[:3]) + (f" and {len(self.inputs) - 3} more" if len(self.inputs) > 3 else "")
        out = f"T = {self.tokens:,} (the leading dimension of {inputs})"
        if self.shared:
            dims = ", ".join(f"{d:,}" for d in self.shared[:3])
            out += f"; the state's dimensions {dims} are multiples of T too: arrays shaped otherwise count as tokens"
        return out


def batch_of(module: HloModule) -> Batch:
    """The batch of a program: its entry parameters whose dimensions are no array the program returns (the
    state it returns, updated, is not the batch), and ``T``, their most common leading dimension."""
    returned = set(shape_dims(module.entry_result()))
    state: list[tuple[int, ...]] = []
    inputs: list[tuple[HloInstruction, tuple[int, ...]]] = []
    for parameter in module.entry_parameters():
        arrays = shape_dims(parameter.shape)
        if len(arrays) != 1 or not arrays[0]:
            continue  # a tuple (an old-style packed input) or a scalar: no dimension to tell
        if arrays[0] in returned:
            state.append(arrays[0])
        else:
            inputs.append((parameter, arrays[0]))
    state_dims = frozenset(tuple(sorted(d)) for d in state)
    leading = {p.name: _leading(dims) for p, dims in inputs}
    count = Counter(d for d in leading.values() if d > 1)
    if not count:
        return Batch(0, (), state_dims, ())
    tokens = max(count, key=lambda d: (count[d], d))
    named = tuple(f"{p.name} {p.shape.split('{')[0]}" for p, _ in inputs if leading[p.name] == tokens)
    shared = tuple(sorted({d for dims in state for d in dims if d % tokens == 0}))
    return Batch(tokens, named, state_dims, shared)


def _leading(dims: tuple[int, ...]) -> int:
    """An input's leading dimension, past leading 1s (a batch of one sequence: its tokens)."""
    return next((d for d in dims if d != 1), 1)


def token_rows(dims: tuple[int, ...], tokens: int) -> set[int]:
    """The rows of tokens an array of ``dims`` carries: each dimension, and each product of consecutive
    dimensions short of all of them, that is a positive multiple of ``tokens`` (empty: it carries none)."""
    out: set[int] = set()
    rank = len(dims)
    for start in range(rank):
        product = 1
        for end in range(start, rank):
            if end - start + 1 == rank and rank > 1:
                break  # the whole array: its size is no dimension
            product *= dims[end]
            if product >= tokens and product % tokens == 0:
                out.add(product)
    return out


def is_matmul(module: HloModule, inst: HloInstruction) -> bool:
    """A matrix product: a dot, convolution or ragged dot, a fusion that holds one, or a custom call whose name
    or scope a GEMM's is (the TPU's Mosaic ``ragged-dot`` kernel)."""
    if inst.opcode in _MATMUL_OPCODES:
        return True
    if inst.opcode == "custom-call":
        gemm = vocabulary().gemm
        return bool(gemm.search(inst.name) or gemm.search(inst.op_name.rsplit("/", 1)[-1]))
    return inst.opcode == "fusion" and any(sub.opcode in _MATMUL_OPCODES for sub in module.nested(inst))


# ---------------------------------------------------------------- the program


def _entry(module: HloModule) -> list[HloInstruction]:
    return [module.instructions[n] for n in module.computations.get(module.entry, ())]


def _producer(module: HloModule, name: str) -> HloInstruction:
    """The op that made an operand, through bitcasts and tuple elements."""
    inst = module.instructions[name]
    while inst.opcode in ("bitcast", "get-tuple-element") and inst.operands and inst.operands[0] in module.instructions:
        inst = module.instructions[inst.operands[0]]
    return inst


def _operand_arrays(module: HloModule, inst: HloInstruction) -> list[Array]:
    return [a for o in inst.operands if o in module.instructions for a in arrays_of(module.instructions[o].shape)]


def _grouped_gemm(module: HloModule, inst: HloInstruction) -> tuple[int, int, int] | None:
    """(rows, groups, tile schedule length or 0) of a ragged dot: its 2-D rows, its 3-D weights' leading
    dimension, the longest 1-D integer operand beyond the group offsets (the TPU kernel's tile schedule)."""
    arrays = _operand_arrays(module, inst)
    weights = [a for a in arrays if len(a.dims) == 3]
    rows = [a for a in arrays if len(a.dims) == 2]
    if not (weights and rows):
        return None
    groups = weights[0].dims[0]
    schedule = [a.dims[0] for a in arrays if len(a.dims) == 1 and a.dims[0] > groups + 1]
    return max(a.dims[0] for a in rows), groups, max(schedule, default=0)


def _constant_groups(module: HloModule, inst: HloInstruction) -> bool:
    """The grouped GEMM's group sizes are a broadcast of one value (every expert the same rows: padded to
    capacity), not computed from the routing: the small integer operands lead back, through copies, tuple
    elements and the kernel that lays out the groups, to broadcasts and constants only."""
    small = [o for o in inst.operands if o in module.instructions and _is_small_int(module.instructions[o].shape)]
    if not small:
        return False
    seen: set[str] = set()
    pending = list(small)
    sources: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen or name not in module.instructions:
            continue
        seen.add(name)
        node = module.instructions[name]
        if node.opcode in _PASS_THROUGH or (node.opcode == "custom-call" and _is_small_int(node.shape)):
            pending.extend(node.operands)
        else:
            sources.add(node.opcode)
    return bool(sources) and sources <= {"broadcast", "constant", "iota"}


def _is_small_int(shape: str) -> bool:
    arrays = arrays_of(shape)
    return bool(arrays) and all(
        len(a.dims) <= 1 and shape.lstrip("(").startswith(("s32", "u32", "s64")) for a in arrays
    )


def program_of(module: HloModule, hbm_bytes_per_s: float = 0.0) -> Program:
    """The program's MoE dimensions and on-chip evidence."""
    batch = batch_of(module)
    out = Program(tokens=batch.tokens, devices=module.num_devices, hbm_bytes_per_s=hbm_bytes_per_s)
    entry = _entry(module)
    for inst in entry:
        found = _grouped_gemm(module, inst) if inst.ragged_dot else None
        if found:
            out.rows, out.experts, out.tiles = found
            if out.tiles > out.experts:
                out.tile_rows = out.rows / (out.tiles - out.experts + 1)
            if _constant_groups(module, inst):
                out.capacity = out.rows // max(out.experts, 1)
            break
    if out.rows and out.tokens:
        if out.capacity:
            out.top_k = _assignments(module, entry, out.tokens) / out.tokens
        elif out.rows % (out.tokens * out.devices) == 0:
            out.top_k = out.rows / (out.tokens * out.devices)
        elif out.rows % out.tokens == 0:
            out.top_k = out.rows / out.tokens
    counts: dict[int, list[int]] = {}
    for inst in entry:
        if inst.opcode in _NO_WORK or inst.opcode.endswith(("-start", "-done")):
            continue  # an async op's tuple holds both ends of a move
        for a in arrays_of(inst.shape):
            if a.bytes < 2**20:
                continue
            tally = counts.setdefault(size_bucket(a.bytes), [0, 0])
            tally[0] += a.on_chip
            tally[1] += 1
            if a.on_chip:
                out.largest_on_chip = max(out.largest_on_chip, a.bytes)
        if _kind(module, inst, out) == "gather":
            table = _table(module, inst)
            if table is not None and table[1].on_chip:
                out.gather_table_on_chip = max(out.gather_table_on_chip, table[1].bytes)
    out.on_chip = {str(b): c for b, c in sorted(counts.items())}
    return out


def _assignments(module: HloModule, entry: Sequence[HloInstruction], tokens: int) -> int:
    """The rows of the (token, k) assignments in a padded program: the most common length of the 1-D integer
    arrays that are a multiple of T (the sort of the routed ids, the dispatch's indices)."""
    lengths = Counter(
        a.dims[0]
        for inst in entry
        if inst.opcode not in _NO_WORK and inst.shape.startswith("s32[")
        for a in arrays_of(inst.shape)
        if len(a.dims) == 1 and a.dims[0] >= tokens and a.dims[0] % tokens == 0
    )
    return max(lengths, key=lambda n: (lengths[n], -n)) if lengths else tokens


# ---------------------------------------------------------------- each op


def _nested_opcodes(module: HloModule, inst: HloInstruction) -> set[str]:
    return {sub.opcode for sub in module.nested(inst)} if inst.opcode == "fusion" else {inst.opcode}


def _is_movement(module: HloModule, inst: HloInstruction) -> bool:
    """Data movement only: a copy, slice, gather, a fusion of nothing else, a collective within one chip."""
    if inst.is_collective:
        group = module.group_of(inst, 0)
        return group is not None and len(group) == 1
    if inst.opcode in _MOVEMENT:
        return True
    inner = _nested_opcodes(module, inst) if inst.opcode == "fusion" else set()
    return bool(inner & _MOVEMENT) and not inner & _ARITHMETIC


def _table(module: HloModule, inst: HloInstruction) -> tuple[int, Array] | None:
    """A gather's table: its largest operand array (the index is the other), with its position among the
    operand arrays."""
    operands = list(enumerate(_operand_arrays(module, inst)))
    return max(operands, key=lambda x: x[1].bytes, default=None)


def _kind(module: HloModule, inst: HloInstruction, program: Program) -> str:
    if inst.ragged_dot:
        return "grouped"
    if inst.opcode in ("copy-start", "copy-done"):
        return "async"
    matmul = is_matmul(module, inst)
    result = arrays_of(inst.shape)
    if matmul and program.experts and len(result) == 1 and len(result[0].dims) == 3:
        if result[0].dims[0] == program.experts and any(
            len(a.dims) == 2 and a.dims[0] == program.rows for a in _operand_arrays(module, inst)
        ):
            return "grouped"  # the experts' weight gradient: [E, K, N] from the rows
    if matmul:
        return "matmul"
    if _is_movement(module, inst):
        return "gather" if "gather" in _nested_opcodes(module, inst) else "move"
    return "other"


def _k_form(dims: tuple[int, ...], tokens: int, k: float) -> bool:
    """The k copies of each token as a dimension of their own: ``[.., T, k, ..]``."""
    return k > 1 and any(a == tokens and b == k for a, b in itertools.pairwise(dims))


def _roles(
    dims: tuple[int, ...], program: Program, batch: Batch, routed: frozenset[int], one_copy: bool = False
) -> str:
    """The dimensions an array carries (letters of ROLES); ``one_copy``: the op moves or computes the routed
    rows of a top-1 program (:func:`_routes_one_copy`), whose rows are its tokens."""
    if not dims:
        return ""
    out = ""
    state = tuple(sorted(dims)) in batch.state
    if state:
        out += "s"
    elif program.tokens:
        rows = token_rows(dims, program.tokens)
        if rows:
            out += "t"
        if rows & routed or (program.rows in rows and program.rows > program.tokens) or (one_copy and rows):
            out += "r"
        if _k_form(dims, program.tokens, program.top_k):
            out += "k"
    experts = program.experts
    if experts and (dims[0] == experts or dims[-1] == experts):
        out += "e"
    if experts and len(dims) == 1 and (dims[0] == experts + 1 or (program.tiles and dims[0] == program.tiles)):
        out += "g"
    return out


def _routes_one_copy(inst: HloInstruction, program: Program) -> bool:
    """In a dropless top-1 program the routed rows are the tokens (``T`` rows both): an op moves or computes
    them where its JAX scope names the MoE layer (vocabulary ``moe_scope``: its dispatch, experts, combine) and
    not its router or a shared expert; the experts' grouped GEMMs whatever their scope."""
    if program.top_k != 1 or program.capacity:
        return False
    if inst.ragged_dot:
        return True
    scope = inst.op_name
    return bool(scope and vocabulary().moe_scope.search(scope) and not _NOT_ROUTED.search(scope))


def _capacity_roles(module: HloModule, inst: HloInstruction, program: Program, arrays: list[OpArray]) -> list[OpArray]:
    """Mark the arrays of a padded program's expert buffers (``E·C`` rows): by the op's role where the buffers
    and the assignments have the same rows (capacity factor 1): a gather reads the buffer (its table) into the
    assignments (its result); a scatter writes the assignments into the buffer (its result); elsewhere a
    2-D+ array with a multiple of ``E·C`` rows that is no ``[T, k, ..]`` array."""
    if not program.capacity:
        return arrays
    ec = program.rows
    opcodes = _nested_opcodes(module, inst)
    scatter, gather = "scatter" in opcodes, "gather" in opcodes and "scatter" not in opcodes
    table = _table(module, inst) if gather else None
    out = []
    operand = -1
    for a in arrays:
        if not a.result:
            operand += 1
        buffer = len(a.dims) >= 2 and "s" not in a.roles and "k" not in a.roles and bool(token_rows(a.dims, ec))
        if scatter:
            buffer = buffer and a.result
        elif gather:
            buffer = buffer and not a.result and table is not None and operand == table[0]
        out.append(OpArray(a.bytes, a.roles + "c", a.on_chip, a.result, a.dims) if buffer else a)
    return out


def _single_copy(module: HloModule, inst: HloInstruction, program: Program, arrays: list[OpArray]) -> str:
    """What the op becomes with one copy per token (k = 1): "gone" where it only relayouts the k copies between
    ``[k·T, ..]`` and ``[T, k, ..]`` (a bitcast at k = 1), sums over them (at k = 1 an elementwise multiply,
    fused into its producer), or only transposes the layout of a ``[T, ..]`` array (the residual stream kept in
    a second layout for the ops on the k copies: a top-1 program keeps one); "" otherwise."""
    if program.top_k <= 1:
        return ""
    k_result = any("k" in a.roles for a in arrays if a.result)
    k_operand = any("k" in a.roles for a in arrays if not a.result)
    inner = _nested_opcodes(module, inst) - _PLUMBING
    if k_result or k_operand:
        if inner and inner <= _LAYOUT:
            return "gone"
        if k_operand and not k_result and "reduce" in inner:
            return "gone"
        return ""
    if inst.opcode != "copy" or not inst.operands or not arrays or any(set(a.roles) & {"r", "s"} for a in arrays):
        return ""
    if "t" not in arrays[0].roles:
        return ""
    source = _producer(module, inst.operands[0])
    same = [a.dims for a in arrays_of(inst.shape)] == [a.dims for a in arrays_of(source.shape)]
    return "gone" if same and _minor_to_major(inst.shape) != _minor_to_major(source.shape) else ""


def _minor_to_major(shape: str) -> str:
    """A layout's dimension order (``{1,0:T(8,128)}`` -> ``1,0``)."""
    found = re.search(r"\{([0-9,]*)", shape)
    return found.group(1) if found else ""


def op_facts(
    module: HloModule, inst: HloInstruction, program: Program, batch: Batch, routed: frozenset[int]
) -> OpFacts:
    """The op's kind and arrays as the resize sees them."""
    kind = _kind(module, inst, program)
    one = _routes_one_copy(inst, program)
    arrays = [
        OpArray(a.bytes, _roles(a.dims, program, batch, routed, one), a.on_chip, True, a.dims)
        for a in arrays_of(inst.shape)
    ]
    arrays += [
        OpArray(a.bytes, _roles(a.dims, program, batch, routed, one), a.on_chip, False, a.dims)
        for a in _operand_arrays(module, inst)
    ]
    arrays = _capacity_roles(module, inst, program, arrays)
    table, scatter_rows, row_bytes = -1, 0, 0
    if kind == "gather":
        found = _table(module, inst)
        results = sum(a.result for a in arrays)
        if found is not None and found[1].dims:
            table, row_bytes = results + found[0], found[1].bytes // max(found[1].dims[0], 1)
    elif "scatter" in _nested_opcodes(module, inst):
        result = arrays_of(inst.shape)
        updates = [a for a in _operand_arrays(module, inst) if len(a.dims) >= 2]
        if len(result) == 1 and len(result[0].dims) >= 2 and not result[0].on_chip and updates:
            scatter_rows = max(a.dims[0] for a in updates)
            row_bytes = result[0].bytes // max(result[0].dims[0], 1)
    single = _single_copy(module, inst, program, arrays)
    return OpFacts(kind, tuple(arrays), table, single, scatter_rows, row_bytes)


def describe(module: HloModule, ops: Sequence[str], hbm_bytes_per_s: float = 0.0) -> tuple[str, list[str]]:
    """The program's facts and each op's (JSON; "" for an op the module does not hold)."""
    program = program_of(module, hbm_bytes_per_s)
    if not program.tokens:
        return program.to_json(), ["" for _ in ops]
    batch = batch_of(module)
    routed = frozenset({program.rows} if program.rows > program.tokens else ())
    out = []
    for op in ops:
        inst = module.instructions.get(op)
        out.append("" if inst is None else op_facts(module, inst, program, batch, routed).to_json())
    return program.to_json(), out


def shape_columns(trace: Trace, columns: EventColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row, its program's facts and its op's (codes and values each, "" unknown): decided once per distinct
    (HLO module, program, op) of the rows, one :func:`describe` per program."""
    n = len(columns)
    none = (np.full(n, -1, dtype=np.int64), np.zeros(0, dtype=object))
    if not n or not trace.hlo or "hlo_op" not in columns.table.columns:
        return (*none, *none)
    mod_c, mod_v = columns.strings("hlo_module")
    op_c, op_v = columns.strings("hlo_op")
    program_ids = columns.numbers("program_id") if "program_id" in columns.table.columns else np.full(n, -1)
    key = combine_codes(mod_c, program_ids, op_c)
    first = first_rows(key)
    mods = lookup(mod_c[first], mod_v, "").tolist()
    ops = [str(op) for op in lookup(op_c[first], op_v, "").tolist()]
    by_module: dict[int, tuple[HloModule, list[int]]] = {}
    for i, (mod, prog, op) in enumerate(zip(mods, program_ids[first].tolist(), ops, strict=True)):
        module = (trace.hlo.get((str(mod), int(prog))) or trace.hlo.get((str(mod), -1))) if op else None
        if module is not None:
            by_module.setdefault(id(module), (module, []))[1].append(i)
    bandwidth = max((float(p.get("hbm_gbps", 0.0)) for p in trace.device_peaks.values()), default=0.0) * 1e9
    programs = np.full(first.size, "", dtype=object)
    shapes = np.full(first.size, "", dtype=object)
    for module, at in by_module.values():
        program, facts = describe(module, [ops[i] for i in at], bandwidth)
        programs[at] = program
        shapes[at] = facts
    program_code, program_values = pd.factorize(programs)
    shape_code, shape_values = pd.factorize(shapes)
    return (
        program_code[key].astype(np.int64),
        np.asarray(program_values, dtype=object),
        shape_code[key].astype(np.int64),
        np.asarray(shape_values, dtype=object),
    )
