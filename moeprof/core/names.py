"""A kernel or op name as one says it: in a sentence (:func:`said`) and in a table's column (:func:`cut`).

Traces name device work by what ran: an XLA op (``all-to-all.3``, ``fusion.12``, an MI300 code object
``input_transpose_fusion.kd``), a NCCL kernel (``ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)``), or a
demangled C++ signature that runs to hundreds of characters (``void dpsk::ep::internode::combine<false, 8,
__nv_bfloat16, 8, 2, 16, 24>(int4*, float*, ...)``, ``void cutlass::device_kernel<flash::FlashAttnBwd<...>
>(...)``, ``void (anonymous namespace)::elementwise_kernel<...>(...)``), or a Tensile GEMM whose name is its
600-character list of tuning parameters. Every screen says them the same way, through this module:

* :func:`qualified`: the signature's head, the part that names the function: no return type (``void``), no
  parameter list, no ``(anonymous namespace)::`` qualifier, a ``cutlass::device_kernel<...>`` wrapper opened
  to the kernel it wraps; template arguments kept. An HLO instruction's text (xprof's long name, ``%fusion.10 =
  f32[16384]{0} fusion(...)``) is its instruction's name. Any other name is kept as it is.
* :func:`said`, in prose (the verdict's lines, evidence): the function's name with its innermost namespace
  (enough to tell ``internode::combine`` from ``intranode::combine``, ``flash::FlashAttnBwd`` from another
  library's), template arguments left out, and a name still longer than ``width`` cut in its middle (its
  head kept: a Tensile name's macro tile, an op's kind; its tail: a ``.kd``, a number).
* :func:`cut`, in a table's column of ``width`` characters: the qualified name whole where it fits, then
  without its leading namespaces, then cut in its middle keeping the function's name at the head and the end
  of its template arguments at the tail (what tells ``dispatch<false, 8, false, 8>`` from ``dispatch<false,
  8, true, 8>``).
* :func:`namespace_of`: the qualifiers before the function (``dpsk::ep::internode``), what evidence quotes
  to say which library's kernels run.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
PROSE_WIDTH = 48  # a kernel's name in a sentence: longer, it is cut in its middle

# qualifiers that say nothing of the kernel: an unnamed namespace as compilers and nsys write it
_ANONYMOUS = re.compile(r"(?:\(anonymous namespace\)|\{anonymous\}|<unnamed>)::")
# the start of every kernel name of a library: NCCL's (ncclKernel_AllToAll_RING_LL_Sum_int8_t,
# ncclDevKernel_SendRecv) and RCCL's
_LIBRARY_PREFIXES = ("ncclDevKernel_", "ncclKernel_")
_WRAPPER = re.compile(r"^[\w:]*device_kernel<(.*)>$", re.DOTALL)
# an HLO instruction as xprof's long names write it: ``%fusion.10 = f32[16384]{0} fusion(...), kind=kLoop``
_HLO_INSTRUCTION = re.compile(r"^%?([A-Za-z_][\w.\-]*) = \S")
_BRACKET = re.compile(r"[<>()]")
_PARENTHESIS = re.compile(r"[()]")


def _outside(text: str) -> list[bool]:
    """Whether each character of ``text`` lies outside every ``<...>`` and ``(...)`` (a bracket itself is not)."""
    # the depth changes at brackets only: the characters between two take the depth as it is (runs, not a
    # step per character: a kernel's signature is a hundred characters and a handful of brackets)
    depth, out, pos = 0, [], 0
    for found in _BRACKET.finditer(text):
        at = found.start()
        out.extend([depth == 0] * (at - pos))
        if text[at] in "<(":
            depth += 1
            out.append(depth == 0)
        else:
            out.append(depth == 0)
            depth -= 1
        pos = at + 1
    out.extend([depth == 0] * (len(text) - pos))
    return out


def _without_parameters(name: str) -> str:
    """A demangled C++ function's qualified name and template arguments: ``void ns::f<1>(int, float*)`` ->
    ``ns::f<1>``. Anything else as it is."""
    text = name.strip()
    if not text.endswith(")") or "(" not in text:
        return text
    # the parameter list: from the "(" that balances the last ")" (the depth, 1 after that ")", moves at
    # parentheses only and reaches 0 first at a "(")
    depth = 0
    for found in reversed(list(_PARENTHESIS.finditer(text))):
        depth += 1 if found.group() == ")" else -1
        if depth == 0:
            head = text[: found.start()].rstrip()
            break
    else:
        return text
    if not head or not re.search(r"[\w>]$", head):
        return text
    # the return type: words before the qualified name, outside template brackets and parentheses (the last
    # space outside them)
    outside = _outside(head)
    at = head.rfind(" ")
    while at >= 0 and not outside[at]:
        at = head.rfind(" ", 0, at)
    return head[at + 1 :] if at >= 0 else head


def qualified(name: str) -> str:
    """The part of a name that names the function, template arguments kept (see the module's docstring):
    ``void cutlass::device_kernel<flash::FlashAttnBwd<...> >(Params)`` -> ``flash::FlashAttnBwd<...>``."""
    instruction = _HLO_INSTRUCTION.match(name.strip())
    if instruction:
        return instruction.group(1)
    text = _without_parameters(_ANONYMOUS.sub("", name.strip()))
    wrapper = _WRAPPER.match(text)
    return wrapper.group(1).strip() if wrapper else text


def _components(text: str) -> list[str]:
    """``a::b<x::y>::c`` -> ``["a", "b<x::y>", "c"]``: split at ``::`` outside brackets."""
    if "::" not in text:
        return [text] if text else []
    outside = _outside(text)
    parts, start = [], 0
    i = text.find("::")
    while i >= 0:  # every "::", overlapping ones too (":::" holds two), as a walk of each position finds them
        if outside[i] and outside[i + 1]:
            parts.append(text[start:i])
            start = i + 2
        i = text.find("::", i + 1)
    parts.append(text[start:])
    return [p for p in parts if p]


def _bare(component: str) -> str:
    """A component without its template arguments (``combine<false, 8>`` -> ``combine``)."""
    return component.split("<", 1)[0].strip() or component


def middle(text: str, width: int, head: int | None = None) -> str:
    """``text`` in ``width`` characters with an ellipsis in the middle: ``head`` characters of its start (default:
    two fifths of the room), the rest from its end."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    room = width - 1
    head = min(room, max(0, room * 2 // 5 if head is None else head))
    return text[:head] + ELLIPSIS + text[len(text) - (room - head) :]


def said(name: str, width: int = PROSE_WIDTH) -> str:
    """A kernel or op as a sentence names it: the function with its innermost namespace, no template arguments,
    cut in its middle where still longer than ``width`` (three fifths of it from the head)."""
    parts = _components(qualified(name))
    if not parts:
        return middle(name.strip(), width, head=(width - 1) * 3 // 5)
    text = "::".join(_bare(p) for p in parts[-2:])
    return middle(text, width, head=(width - 1) * 3 // 5)


def namespace_of(name: str) -> str:
    """The qualifiers before the function's name (``void dpsk::ep::internode::combine<...>(...)`` ->
    ``dpsk::ep::internode``), "" where it has none."""
    parts = _components(qualified(name))
    return "::".join(_bare(p) for p in parts[:-1])


def _without_namespaces(name: str, width: int) -> str:
    """Leading ``ns::`` qualifiers dropped one by one (outside brackets) until the name fits."""
    while len(name) > width:
        outside = _outside(name)
        at = next((i for i in range(len(name) - 1) if outside[i] and name[i : i + 2] == "::"), None)
        if at is None:
            return name
        name = name[at + 2 :]
    return name


def cut(name: str, width: int) -> str:
    """A kernel, op or collective name in a column of at most ``width`` characters (see the module's docstring)."""
    if len(name) <= width:
        return name
    short = qualified(name)
    if len(short) <= width:
        return short
    short = _without_namespaces(short, width)
    if len(short) <= width:
        return short
    for prefix in _LIBRARY_PREFIXES:  # what every kernel of the library starts with tells two of them apart least
        if short.startswith(prefix) and len(short) > len(prefix):
            short = short[len(prefix) :]
            break
    if len(short) <= width:
        return short
    # the function's name whole at the head where the room allows, the end of its template arguments at the tail
    base = short.split("<", 1)[0]
    head = None
    if "<" in short and len(base) + 3 <= width:  # "name<" + "…" + at least the closing ">"
        if width - len(base) - 2 < 5:  # no room for a readable end of the arguments: none of them
            return f"{base}<{ELLIPSIS}>"
        head = max(len(base) + 1, (width - 1) * 2 // 5)
    return middle(short, width, head)
