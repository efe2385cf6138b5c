"""What the compiled XPlane kernels return instead of raising: one set of numbers for the C kernels
(``_xplane_native.c`` defines the same: a test checks), the numba kernels (``_xplane_jit``) and the
decoder that reads them (``xplane_wire``), kept apart so that neither kernel module imports the decoder."""

from __future__ import annotations

OK, TRUNCATED_VARINT, LONG_VARINT, PAST_END, FIELD_ZERO, BAD_WIRE = 0, 1, 2, 3, 4, 5
FULL = 6  # output arrays full: grow them and call again from where it stopped
KERNEL_ERRORS = {
    TRUNCATED_VARINT: "truncated varint",
    LONG_VARINT: "varint longer than 10 bytes",
    PAST_END: "a field runs past the end of its message",
    FIELD_ZERO: "field number 0",
    BAD_WIRE: "unsupported wire type",
}
