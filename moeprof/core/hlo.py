"""Read the HLO of a compiled XLA program: opcodes, communicating groups, bytes.

The kind of a collective comes from its HLO opcode, never from its op name (JAX
names an all-reduce ``psum_invariant.7``). JAX stores each program's HLO in the
profile (``/host:metadata``, stat ``Hlo Proto``); jaxlib prints it as HLO text,
which is also what ``--xla_dump_to`` writes, so one text reader serves both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache

import numpy as np

# bytes per element of each XLA primitive type
_ELEMENT_BYTES = {
    "pred": 1,
    "s2": 1,
    "s4": 1,
    "u2": 1,
    "u4": 1,
    "s8": 1,
    "u8": 1,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "f8e4m3": 1,
    "f8e4m3fnuz": 1,
    "f8e5m2fnuz": 1,
    "f8e4m3b11fnuz": 1,
    "f8e3m4": 1,
    "f8e8m0fnu": 1,
    "f4e2m1fn": 1,
    "s16": 2,
    "u16": 2,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    "c64": 8,
    "c128": 16,
}
_ARRAY_SHAPE = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")
_INSTRUCTION_HEAD = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*")
_COMPUTATION_HEAD = re.compile(r"^\s*(ENTRY\s+)?%?([^\s(]+)\s*[({]")
_OPERAND_NAME = re.compile(r"%([^\s,()]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')

COLLECTIVE_OPCODES = frozenset(
    {
        "all-to-all",
        "ragged-all-to-all",
        "all-gather",
        "all-gather-start",
        "all-reduce",
        "all-reduce-start",
        "reduce-scatter",
        "collective-permute",
        "collective-permute-start",
        "collective-broadcast",
        "send",
        "recv",
    }
)
ASYNC_WRAPPERS = frozenset({"async-start", "async-update", "async-done"})


def shape_bytes(shape: str) -> int:
    """Bytes of every array in an HLO shape string (tuples summed; layouts ignored)."""
    total = 0
    for dtype, dims in _ARRAY_SHAPE.findall(shape):
        size = _ELEMENT_BYTES.get(dtype)
        if size is None:
            continue
        n = 1
        for d in dims.split(","):
            if d:
                n *= int(d)
        total += n * size
    return total


def shape_dims(shape: str) -> list[tuple[int, ...]]:
    """The dimensions of every array in an HLO shape string, in order (a tuple's elements each; layouts and
    element types left out): ``(bf16[8,128]{1,0}, s32[])`` -> ``[(8, 128), ()]``."""
    return [tuple(int(d) for d in dims.split(",") if d) for _, dims in _ARRAY_SHAPE.findall(shape)]


def _top_level_tuple_bytes(shape: str) -> list[int]:
    """Bytes of each top-level element of a tuple shape ``(a, b, ...)``."""
    shape = shape.strip()
    if not shape.startswith("("):
        return [shape_bytes(shape)]
    return [shape_bytes(p) for p in _top_level_parts(shape[1:-1])] or [0]


def _shape_and_rest(body: str) -> tuple[str, str]:
    """An instruction's text after ``name =``: its shape (a balanced tuple or one token) and what follows."""
    if body.startswith("("):
        cut = _balanced(body, 0)
    else:
        cut = body.find(" ")
        cut = len(body) if cut < 0 else cut
    return body[:cut], body[cut:].lstrip()


def _balanced(text: str, start: int) -> int:
    """Index just past the bracket group that opens at ``text[start]``."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _attribute(attrs: str, key: str) -> str | None:
    """The raw value of ``key=...`` in an attribute list, brackets balanced."""
    m = re.search(rf"(?:^|[\s,]){re.escape(key)}=", attrs)
    if not m:
        return None
    i = m.end()
    if i < len(attrs) and attrs[i] in "{[(":
        end = _balanced(attrs, i)
        # iota form: [2,4]<=[8] or [2,4]<=[4,2]T(1,0)
        if attrs[i] == "[" and attrs.startswith("<=", end):
            tail = re.match(r"<=\[[0-9,]*\](?:T\([0-9,]*\))?", attrs[end:])
            if tail:
                end += tail.end()
        return attrs[i:end]
    m2 = re.match(r"[^,\s]*", attrs[i:])
    return m2.group(0) if m2 else ""


def parse_groups(value: str | None) -> tuple[tuple[int, ...], ...] | None:
    """``{{0,1},{2,3}}`` or the iota form ``[2,2]<=[4]`` / ``[2,2]<=[2,2]T(1,0)``.

    ``{}`` (every device) returns ``()``; absent returns None.
    """
    if value is None:
        return None
    value = value.strip()
    iota = re.fullmatch(r"\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?", value)
    if iota:
        out_dims = [int(x) for x in iota.group(1).split(",")]
        dims = [int(x) for x in iota.group(2).split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if iota.group(3):
            ids = ids.transpose([int(x) for x in iota.group(3).split(",")])
        ids = ids.reshape(out_dims[0], -1) if len(out_dims) > 1 else ids.reshape(1, -1)
        return tuple(tuple(int(x) for x in row) for row in ids)
    groups = re.findall(r"\{([0-9,\s]*)\}", value)
    return tuple(tuple(int(x) for x in g.split(",") if x.strip()) for g in groups if g.strip())


@dataclass(frozen=True)
class HloInstruction:
    name: str
    opcode: str  # async wrappers resolved to the wrapped opcode
    shape: str
    computation: str
    operands: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    replica_groups: tuple[tuple[int, ...], ...] | None = None
    source_target_pairs: tuple[tuple[int, ...], ...] | None = None
    bytes: int = 0
    op_name: str = ""  # metadata op_name: the framework scope the op came from ("jit(step)/moe/all_to_all")
    # a ragged dot as one op: XLA's ``ragged-dot``, or a custom call that says it is one (the TPU's Mosaic
    # kernel carries the frontend attribute ``ragged_dot_tiling``)
    ragged_dot: bool = False

    @property
    def is_collective(self) -> bool:
        return self.opcode in COLLECTIVE_OPCODES


@dataclass
class HloModule:
    name: str
    instructions: dict[str, HloInstruction] = field(default_factory=dict)
    computations: dict[str, list[str]] = field(default_factory=dict)
    entry: str = ""
    roots: dict[str, str] = field(default_factory=dict)  # computation -> its ROOT instruction
    num_partitions: int = 1
    replica_count: int = 1
    # computation -> (operands, users) edges, built on first use by moeprof.dependency
    graphs: dict[str, tuple[dict[str, list[str]], dict[str, list[str]]]] = field(default_factory=dict, repr=False)

    @property
    def num_devices(self) -> int:
        return max(1, self.num_partitions * self.replica_count)

    def entry_parameters(self) -> list[HloInstruction]:
        """The program's inputs: the ``parameter`` instructions of its entry computation, in text order."""
        names = self.computations.get(self.entry, ())
        return [self.instructions[n] for n in names if self.instructions[n].opcode == "parameter"]

    def entry_result(self) -> str:
        """The shape of what the program returns (its entry computation's ROOT), "" where unknown."""
        root = self.instructions.get(self.roots.get(self.entry, ""))
        return root.shape if root is not None else ""

    def nested(self, instruction: HloInstruction) -> Iterator[HloInstruction]:
        """Every instruction of the computations ``instruction`` calls (a fusion's body, and what that calls),
        each computation once: what a fused op does inside."""
        seen: set[str] = set()
        pending = list(instruction.calls)
        while pending:
            computation = pending.pop()
            if computation in seen:
                continue
            seen.add(computation)
            for member in self.computations.get(computation, ()):
                sub = self.instructions[member]
                pending.extend(sub.calls)
                yield sub

    def group_of(self, instruction: HloInstruction, device_id: int) -> tuple[int, ...] | None:
        """The devices ``device_id`` exchanges data with in this collective (itself included)."""
        return group_members(instruction.replica_groups, instruction.source_target_pairs, device_id, self.num_devices)


def group_members(
    replica_groups: tuple[tuple[int, ...], ...] | None,
    source_target_pairs: tuple[tuple[int, ...], ...] | None,
    device_id: int,
    num_devices: int = 1,
) -> tuple[int, ...] | None:
    """The devices ``device_id`` exchanges data with in a collective (itself included), from its replica
    groups or source-target pairs; ``num_devices``: the program's devices, which ``replica_groups={}`` means."""
    if source_target_pairs is not None:
        peers = {device_id}
        for pair in source_target_pairs:
            if len(pair) == 2 and device_id in pair:
                peers.update(pair)
        return tuple(sorted(peers))
    if replica_groups is None:
        return None
    if not replica_groups:
        # "{}" means every device of the program; unknown when the text does not say how many
        return tuple(range(num_devices)) if num_devices > 1 else None
    for g in replica_groups:
        if device_id in g:
            return g
    return None


def parse_hlo_text(text: str) -> HloModule:
    """Parse HLO text (as printed by XLA) into instructions keyed by name."""
    header = re.search(r"^HloModule\s+([^\s,]+)(.*)$", text, re.M)
    module = HloModule(name=header.group(1) if header else "")
    if header:
        for key in ("num_partitions", "replica_count"):
            m = re.search(rf"{key}=(\d+)", header.group(2))
            if m:
                setattr(module, key, int(m.group(1)))
    raw: dict[str, tuple[str, str, str, str, str]] = {}
    roots: dict[str, str] = {}
    computation = ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        if not line.startswith(" ") and line.rstrip().endswith("{"):
            m = _COMPUTATION_HEAD.match(line)
            if m:
                computation = m.group(2)
                module.computations[computation] = []
                if m.group(1):
                    module.entry = computation
            continue
        if not computation or line.strip() == "}":
            continue
        m = _INSTRUCTION_HEAD.match(line)
        if not m:
            continue
        body = _COMMENT.sub("", line[m.end() :])
        name = m.group(1).lstrip("%")
        shape, rest = _shape_and_rest(body)
        paren = rest.find("(")
        if paren < 0:
            continue
        opcode = rest[:paren].strip()
        close = _balanced(rest, paren)
        operands = rest[paren + 1 : close - 1]
        attrs = rest[close:].lstrip(", ")
        raw[name] = (opcode, shape, operands, attrs, computation)
        module.computations[computation].append(name)
        if line.lstrip().startswith("ROOT"):
            roots[computation] = name

    def build(name: str) -> HloInstruction:
        opcode, shape, operands, attrs, comp = raw[name]
        calls_value = _attribute(attrs, "calls")
        calls = tuple(c.lstrip("%") for c in re.split(r"[,\s]+", calls_value.strip("{}")) if c) if calls_value else ()
        source = attrs
        resolved = opcode
        if opcode in ASYNC_WRAPPERS and calls:
            root = roots.get(calls[0])
            if root is not None:
                resolved, _, _, source, _ = raw[root]
        operand_names = tuple(_OPERAND_NAME.findall(operands))
        operand_bytes = sum(shape_bytes(raw[o][1]) for o in operand_names if o in raw)
        result_bytes = max(_top_level_tuple_bytes(shape)) if shape.startswith("(") else shape_bytes(shape)
        return HloInstruction(
            name=name,
            opcode=resolved,
            shape=shape,
            computation=comp,
            operands=operand_names,
            calls=calls,
            replica_groups=parse_groups(_attribute(source, "replica_groups")),
            source_target_pairs=parse_groups(_attribute(source, "source_target_pairs")),
            # the size nccl-tests reports: the larger of what goes in and what comes out
            bytes=max(operand_bytes, result_bytes),
            op_name=named.group(1) if (named := _OP_NAME.search(attrs)) else "",
            ragged_dot=opcode == "ragged-dot" or (opcode == "custom-call" and "ragged_dot" in attrs),
        )

    module.instructions = {name: build(name) for name in raw}
    module.roots = roots
    return module


# ---------------------------------------------------------------- FLOPs of ragged dots, from the shapes


def array_dims(shape: str) -> tuple[int, ...] | None:
    """The dimensions of an array shape (``bf16[16,2048,1024]{...}`` -> (16, 2048, 1024)); None for a tuple
    or a text that is no array shape."""
    if shape.startswith("("):
        return None
    m = _ARRAY_SHAPE.search(shape)
    return tuple(int(x) for x in m.group(2).split(",") if x) if m else None


@dataclass(frozen=True)
class Recount:
    """The FLOPs of the ragged dots inside one op, from its HLO shapes (``lhs [M,K]`` and ``rhs [G,K,N]``: each
    of the M rows meets one of the G matrices, 2·M·K·N), and what XLA's cost model counts for them."""

    flops: float  # what they do
    # what XLA counts for them, dense over every group: the op's stated FLOPs less this, plus ``flops``, is
    # what the op does; None where the op is the ragged dot itself (its FLOPs are ``flops``, whatever XLA says)
    counted_dense: float | None
    ragged_dots: int  # how many it holds


def recount_flops(module: HloModule, name: str) -> Recount | None:
    """What the ragged dots in the top-level op ``name`` do, where the HLO shows one (None elsewhere):

    * the op is a ragged dot (``ragged-dot``, a custom call marked ``ragged_dot``): output ``[M, N]``, its
      operand ``[M, K]`` (the first of rank 2 whose rows are the output's): 2·M·K·N;
    * a fusion holding the weight gradient of a ragged dot as XLA lowers it on TPUs: a ``convolution`` over
      the group axis G of two operands ``[G, M, A]`` and ``[G, M, B]`` that are ``select`` of a broadcast
      ``pred[G, M]`` group mask (each row in one group) contracting M to ``[G, A, B]``: XLA counts it dense,
      2·G·M·A·B; it does 2·M·A·B (docs/metrics.md, "Utilization").
    """
    inst = module.instructions.get(name)
    if inst is None:
        return None
    if inst.ragged_dot:
        flops = _ragged_dot_flops(module, inst)
        return Recount(flops, None, 1) if flops is not None else None
    if inst.opcode != "fusion":
        return None
    true = dense = 0.0
    found = 0
    for sub in module.nested(inst):
        masked = _masked_group_contraction(module, sub)
        if masked is not None:
            true, dense, found = true + masked[0], dense + masked[1], found + 1
    return Recount(true, dense, found) if found else None


def recount_expression(expression: HloExpression) -> Recount | None:
    """:func:`recount_flops` from one op's own text where the program's HLO is not in the profile (a capture
    whose ``/host:metadata`` was left out): its operand shapes are written inline. A ragged dot as before; a
    fusion of ``[M, A]``, ``[M, B]`` and a group mask ``pred[G, M]`` into ``[G, A, B]`` (the weight gradient
    of a ragged dot, the convolution inside it not visible): XLA counts 2·G·M·A·B, it does 2·M·A·B. None
    elsewhere."""
    out = array_dims(expression.shape)
    if out is None:
        return None
    dims = [d for d in map(array_dims, expression.operand_shapes) if d is not None]
    masks = [d for t, d in zip(expression.operand_shapes, map(array_dims, expression.operand_shapes), strict=True)
             if t.startswith("pred") and d is not None and len(d) == 2]  # fmt: skip
    if expression.ragged_dot:
        lhs = next((d for d in dims if len(d) == 2 and len(out) == 2 and d[0] == out[0]), None)
        return Recount(2.0 * out[0] * lhs[1] * out[1], None, 1) if lhs is not None else None
    if expression.opcode != "fusion" or len(out) != 3:
        return None
    groups, a, b = out
    for mask in (d for d in masks if d[0] == groups):
        rows = mask[1]
        if (rows, a) in dims and (rows, b) in dims:
            true = 2.0 * rows * a * b
            return Recount(true, true * groups, 1)
    return None


def _ragged_dot_flops(module: HloModule, inst: HloInstruction) -> float | None:
    out = array_dims(inst.shape)
    if not out or len(out) != 2:
        return None
    for operand in inst.operands:
        dims = array_dims(module.instructions[operand].shape) if operand in module.instructions else None
        if dims is not None and len(dims) == 2 and dims[0] == out[0]:
            return 2.0 * out[0] * dims[1] * out[1]
    return None


def _group_mask(module: HloModule, name: str) -> tuple[int, int, int] | None:
    """(G, M, X) where ``name`` is ``[G, M, X]`` made by a ``select`` on a broadcast ``pred[G, M]`` (through
    the fusion that computes it); None elsewhere."""
    inst = module.instructions.get(name)
    if inst is not None and inst.opcode == "fusion" and inst.calls:
        inst = module.instructions.get(module.roots.get(inst.calls[0], ""))
    if inst is None or inst.opcode != "select" or not inst.operands:
        return None
    dims = array_dims(inst.shape)
    mask = module.instructions.get(inst.operands[0])
    if dims is None or len(dims) != 3 or mask is None or mask.opcode != "broadcast" or not mask.operands:
        return None
    source = module.instructions.get(mask.operands[0])
    pred = array_dims(source.shape) if source is not None and source.shape.startswith("pred") else None
    return (dims[0], dims[1], dims[2]) if pred == dims[:2] else None


def _masked_group_contraction(module: HloModule, inst: HloInstruction) -> tuple[float, float] | None:
    """(FLOPs done, FLOPs XLA counts) of a convolution that contracts the rows M of two group-masked operands
    ``[G, M, A]``, ``[G, M, B]`` into ``[G, A, B]``; None for any other instruction."""
    if inst.opcode not in ("convolution", "dot") or len(inst.operands) != 2:
        return None
    a, b = (_group_mask(module, o) for o in inst.operands)
    out = array_dims(inst.shape)
    if a is None or b is None or out is None or a[:2] != b[:2] or sorted(out) != sorted((a[0], a[2], b[2])):
        return None
    groups, rows = a[0], a[1]
    true = 2.0 * rows * a[2] * b[2]
    return true, true * groups


@dataclass(frozen=True)
class HloExpression:
    """One HLO instruction as its own text states it: what a TPU op's event is named in an XPlane
    (``%fusion.12 = bf16[8,128]{1,0} fusion(bf16[8,64]{1,0} %p.1), kind=kLoop, calls=%fused.3``) and in
    xprof's and JAX's trace JSON (``args.long_name``). Operand shapes are written inline, so the bytes of
    a collective are known without the module; an async wrapper's wrapped op is not (``calls=`` names a
    computation only the module holds)."""

    name: str
    opcode: str  # as written: an async wrapper stays ``async-start``
    shape: str
    operands: tuple[str, ...] = ()  # operand names in order (a -done op's first names its -start)
    bytes: int = 0  # the larger of the operands' bytes and the result's (its largest tuple element)
    replica_groups: tuple[tuple[int, ...], ...] | None = None
    source_target_pairs: tuple[tuple[int, ...], ...] | None = None
    host_transfer: bool = False  # is_host_transfer=true: a send/recv between the device and its host
    dcn: bool = False  # a frontend attribute names a DCN channel (_xla_dcn_*): a transfer between slices
    channel_id: int = -1  # channel_id=N (-1 absent): a DCN send names its recv's channel
    dcn_recv_channel: int = -1  # _xla_dcn_recv_channel="N" (-1 absent): the channel of the send's recv
    rendezvous: str = ""  # _xla_host_transfer_rendezvous: a DCN collective's name ("all-reduce.49_47")
    operand_shapes: tuple[str, ...] = ()  # each operand's shape as written inline ("" where none is)
    ragged_dot: bool = False  # a ragged dot as one op (see HloInstruction.ragged_dot)


_DCN_ATTRIBUTE = re.compile(r"\b_xla_dcn_\w*=")
_DCN_RECV_CHANNEL = re.compile(r'\b_xla_dcn_recv_channel="?(\d+)')
_RENDEZVOUS = re.compile(r'\b_xla_host_transfer_rendezvous="([^"]*)"')


def parse_expression(text: str) -> HloExpression | None:
    """The parts of one HLO instruction's text (``%name = <shape> opcode(operands), attributes``); None
    where the text is no instruction (a bare op name, as xprof's streaming trace viewer writes them)."""
    head = _INSTRUCTION_HEAD.match(text)
    if not head:
        return None
    body = _COMMENT.sub("", text[head.end() :])
    shape, rest = _shape_and_rest(body)
    paren = rest.find("(")
    opcode = rest[:paren].strip() if paren >= 0 else ""
    if paren < 0 or not re.fullmatch(r"[a-z][a-z0-9\-]*", opcode):
        return None
    close = _balanced(rest, paren)
    operands = rest[paren + 1 : close - 1]
    attrs = rest[close:].lstrip(", ")
    result_bytes = max(_top_level_tuple_bytes(shape)) if shape.startswith("(") else shape_bytes(shape)
    return HloExpression(
        name=head.group(1).lstrip("%"),
        opcode=opcode,
        shape=shape,
        operands=tuple(_OPERAND_NAME.findall(operands)),
        bytes=max(shape_bytes(operands), result_bytes),
        replica_groups=parse_groups(_attribute(attrs, "replica_groups")),
        source_target_pairs=parse_groups(_attribute(attrs, "source_target_pairs")),
        host_transfer=_attribute(attrs, "is_host_transfer") == "true",
        dcn=bool(_DCN_ATTRIBUTE.search(attrs)),
        channel_id=int(channel) if (channel := _attribute(attrs, "channel_id")) and channel.isdigit() else -1,
        dcn_recv_channel=int(m.group(1)) if (m := _DCN_RECV_CHANNEL.search(attrs)) else -1,
        rendezvous=m.group(1) if (m := _RENDEZVOUS.search(attrs)) else "",
        operand_shapes=tuple(_shape_and_rest(part.strip())[0] for part in _top_level_parts(operands)),
        ragged_dot=opcode == "ragged-dot" or (opcode == "custom-call" and "ragged_dot" in attrs),
    )


def _top_level_parts(text: str) -> list[str]:
    """``text`` split at the commas outside any bracket (an operand list: ``f32[2,3]{1,0} %a, s32[] %b``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


@cache
def _hlo_module_class():  # pragma: no cover - depends on the installed jaxlib
    try:
        from jaxlib._hlo import HloModule as NativeHloModule
    except ImportError:
        return None
    return NativeHloModule


def hlo_text_from_module_proto(serialized: bytes) -> str | None:
    """HLO text of a serialized ``HloModuleProto`` (jaxlib prints it), or None."""
    native = _hlo_module_class()
    if native is None:
        return None
    try:
        return native.from_serialized_hlo_module_proto(serialized).to_string()
    except Exception:  # a corrupt or newer proto: go on without the HLO
        return None
