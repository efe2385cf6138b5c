/* Native kernels for moeprof.readers.xplane_wire: the two loops of _xplane_jit.py, in C.
 *
 * Why C beside numba: numba pays ~0.5-0.9 s per process before its first decoded byte (its import,
 * then a first dispatch that loads its typing registries even from the cache), more than decoding a
 * 1M-event capture costs. This module loads in about a millisecond. It is optional: setup.py builds
 * it where a C compiler is there, and the reader falls back to numba or numpy without it.
 *
 * Semantics are _xplane_jit.py's, line for line (the tests run the routes against each other and
 * against jaxlib): every read is checked against the end of the message it belongs to, errors are
 * returned as codes (the caller raises WireError), values are int64 bit patterns. Unlike numba, the
 * arguments are checked here too (dtypes, shapes, every body within the buffer, every slot within
 * the stat arrays): a wrong call raises instead of writing out of bounds. The loops run without the
 * GIL, as the numba kernels do (nogil), so the reader's per-line threads run them in parallel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* error codes: the same numbers as readers/wire_status.py's (a test compares them) */
#define OK 0
#define TRUNCATED_VARINT 1
#define LONG_VARINT 2
#define PAST_END 3
#define FIELD_ZERO 4
#define BAD_WIRE 5
#define FULL 6

/* (value, position after it) of the varint at pos; position -1 (truncated) or -2 (longer than 10 bytes) */
static inline int64_t varint(const uint8_t *data, int64_t pos, int64_t end, int64_t *value) {
    if (pos < end && data[pos] < 0x80) {
        *value = data[pos];
        return pos + 1;
    }
    uint64_t result = 0;
    int shift = 0;
    int64_t p = pos;
    while (p < end && shift < 70) {
        uint64_t b = data[p];
        p++;
        result |= (b & 0x7F) << shift; /* shift <= 63: bits past 64 drop, as protobuf's do */
        if (b < 0x80) {
            *value = (int64_t)result;
            return p;
        }
        shift += 7;
    }
    *value = 0;
    return p - pos >= 10 ? -2 : -1;
}

static inline int varint_error(int64_t p) { return p == -1 ? TRUNCATED_VARINT : LONG_VARINT; }

/* the key of the field at *pos: its number and wire type, *pos moved past it; OK or an error code */
static inline int next_key(const uint8_t *data, int64_t *pos, int64_t end, uint64_t *number, uint64_t *wire) {
    int64_t key;
    *pos = varint(data, *pos, end, &key);
    if (*pos < 0) return varint_error(*pos);
    *number = (uint64_t)key >> 3;
    *wire = (uint64_t)key & 7;
    return *number == 0 ? FIELD_ZERO : OK;
}

/* the payload of the length-delimited value at pos: [*start, *stop) within end; OK or an error code */
static inline int payload(const uint8_t *data, int64_t pos, int64_t end, int64_t *start, int64_t *stop) {
    int64_t length;
    int64_t p = varint(data, pos, end, &length);
    if (p < 0) return varint_error(p);
    if (length < 0 || length > end - p) return PAST_END;
    *start = p;
    *stop = p + length;
    return OK;
}

/* position after a field value of this wire type, or a negative error code */
static inline int64_t skip(const uint8_t *data, int64_t pos, int64_t end, uint64_t wire) {
    int64_t value, p;
    if (wire == 0) {
        p = varint(data, pos, end, &value);
        return p >= 0 ? p : -varint_error(p);
    }
    if (wire == 2) {
        int64_t start, stop;
        int err = payload(data, pos, end, &start, &stop);
        return err == OK ? stop : -err;
    }
    if (wire == 1) return pos + 8 <= end ? pos + 8 : -PAST_END;
    if (wire == 5) return pos + 4 <= end ? pos + 4 : -PAST_END;
    return -BAD_WIRE;
}

/* ------------------------------------------------------------------------------------------ buffers */

/* One argument's buffer, checked: C-contiguous, `ndim` dimensions, items of `itemsize` bytes whose
 * struct code is one of `codes`. */
static int get_buffer(PyObject *obj, Py_buffer *view, const char *what, int ndim, Py_ssize_t itemsize,
                      const char *codes, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    size_t length = strlen(format);
    char code = length ? format[length - 1] : '\0';
    if (view->ndim != ndim || view->itemsize != itemsize || code == '\0' || strchr(codes, code) == NULL) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %d-d array of %zd-byte items (%s), got %d-d '%s'", what, ndim,
                     itemsize, codes, view->ndim, format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#define INT64_CODES "lq"

static PyObject *field_run(PyObject *self, PyObject *args) {
    PyObject *data_obj, *body_obj, *body_end_obj;
    long long first, end, tag;
    if (!PyArg_ParseTuple(args, "OLLLOO:field_run", &data_obj, &first, &end, &tag, &body_obj, &body_end_obj))
        return NULL;
    Py_buffer data, body, body_end;
    if (get_buffer(data_obj, &data, "data", 1, 1, "Bb", 0) < 0) return NULL;
    if (get_buffer(body_obj, &body, "body", 1, 8, INT64_CODES, 1) < 0) goto fail_data;
    if (get_buffer(body_end_obj, &body_end, "body_end", 1, 8, INT64_CODES, 1) < 0) goto fail_body;
    if (first < 0 || end > (long long)data.len || body.shape[0] != body_end.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "field_run: a range outside the data, or bodies of unequal length");
        goto fail;
    }
    const uint8_t *d = (const uint8_t *)data.buf;
    int64_t *b = (int64_t *)body.buf, *be = (int64_t *)body_end.buf;
    const int64_t capacity = body.shape[0];
    int64_t pos = first, k = 0;
    int err = OK;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end && d[pos] == tag) {
        if (k == capacity) {
            err = FULL;
            break;
        }
        err = payload(d, pos + 1, end, &b[k], &be[k]);
        if (err != OK) break;
        pos = be[k];
        k++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&body_end);
    PyBuffer_Release(&body);
    PyBuffer_Release(&data);
    return Py_BuildValue("(LLi)", (long long)k, (long long)pos, err);
fail:
    PyBuffer_Release(&body_end);
fail_body:
    PyBuffer_Release(&body);
fail_data:
    PyBuffer_Release(&data);
    return NULL;
}

/* where a decoded stat goes: the requested slot of its metadata id (the last one on a row wins) */
typedef struct {
    const int64_t *req_ids;
    const int64_t *req_slot;
    Py_ssize_t n_req;
    Py_ssize_t row_stride; /* events per slot row of the 2-d outputs */
    int8_t *kind;
    int64_t *value, *vstart, *vend;
} Slots;

static inline void store(const Slots *s, int64_t mid, int64_t kind, int64_t value, int64_t vstart, int64_t vend,
                         int64_t row) {
    if (kind == 0) return;
    for (Py_ssize_t r = 0; r < s->n_req; r++) { /* requested ids are few: a linear scan */
        if (s->req_ids[r] == mid) {
            Py_ssize_t at = s->req_slot[r] * s->row_stride + row;
            s->kind[at] = (int8_t)kind;
            s->value[at] = value;
            s->vstart[at] = vstart;
            s->vend[at] = vend;
            return;
        }
    }
}

/* one XStat with its fields in any order, repeated or unknown (each field: the last one set wins) */
static int stat_any_layout(const uint8_t *data, int64_t pos, int64_t end, int64_t row, const Slots *s) {
    int64_t mid = 0, kind = 0, value = 0, vstart = 0, vend = 0;
    while (pos < end) {
        uint64_t number, wire;
        int err = next_key(data, &pos, end, &number, &wire);
        if (err != OK) return err;
        if (wire == 0 && (number == 1 || number == 3 || number == 4 || number == 7)) {
            int64_t v;
            pos = varint(data, pos, end, &v);
            if (pos < 0) return varint_error(pos);
            if (number == 1) {
                mid = v;
            } else {
                kind = (int64_t)number;
                value = v;
            }
        } else if (wire == 1 && number == 2) {
            if (pos + 8 > end) return PAST_END;
            uint64_t v = 0;
            for (int j = 0; j < 8; j++) v |= (uint64_t)data[pos + j] << (8 * j);
            kind = 2;
            value = (int64_t)v;
            pos += 8;
        } else if (wire == 2 && (number == 5 || number == 6)) {
            err = payload(data, pos, end, &vstart, &vend);
            if (err != OK) return err;
            kind = (int64_t)number;
            pos = vend;
        } else {
            pos = skip(data, pos, end, wire);
            if (pos < 0) return (int)-pos;
        }
    }
    store(s, mid, kind, value, vstart, vend, row);
    return OK;
}

/* every event of a line (fields in any order), its requested stats to their slots; (error, event index) */
static int decode_events(const uint8_t *data, const int64_t *body, const int64_t *body_end, int64_t m,
                         const Slots *s, int64_t *metadata_id, int64_t *offset_ps, int64_t *duration_ps,
                         int64_t *where) {
    for (int64_t i = 0; i < m; i++) {
        int64_t pos = body[i], end = body_end[i];
        int64_t mid = 0, off = 0, dur = 0;
        *where = i;
        while (pos < end) {
            uint64_t number, wire;
            int err = next_key(data, &pos, end, &number, &wire);
            if (err != OK) return err;
            if (wire == 0 && (number == 1 || number == 2 || number == 3 || number == 5)) {
                int64_t v;
                pos = varint(data, pos, end, &v);
                if (pos < 0) return varint_error(pos);
                if (number == 1)
                    mid = v;
                else if (number == 2)
                    off = v;
                else if (number == 3)
                    dur = v;
                else /* num_occurrences shares a oneof with offset_ps: setting it clears the offset */
                    off = 0;
            } else if (wire == 2 && number == 4) {
                int64_t p, e;
                err = payload(data, pos, end, &p, &e);
                if (err != OK) return err;
                int done = 0;
                /* the layout XLA writes: 08 <id> <value key> <value>, the value ending the message */
                if (e - p >= 4 && data[p] == 0x08) {
                    int64_t mid_s, v;
                    int64_t t = varint(data, p + 1, e, &mid_s);
                    int64_t tag = (0 < t && t < e) ? data[t] : 0;
                    if (tag == 0x18 || tag == 0x20 || tag == 0x38 || tag == 0x2A || tag == 0x32) {
                        int64_t q = varint(data, t + 1, e, &v);
                        if (q > 0) {
                            if (tag == 0x2A || tag == 0x32) {
                                if (v >= 0 && v == e - q) {
                                    store(s, mid_s, tag >> 3, 0, q, e, i);
                                    done = 1;
                                }
                            } else if (q == e) {
                                store(s, mid_s, tag >> 3, v, 0, 0, i);
                                done = 1;
                            }
                        }
                    }
                }
                if (!done) {
                    err = stat_any_layout(data, p, e, i, s);
                    if (err != OK) return err;
                }
                pos = e;
            } else {
                pos = skip(data, pos, end, wire);
                if (pos < 0) return (int)-pos;
            }
        }
        metadata_id[i] = mid;
        offset_ps[i] = off;
        duration_ps[i] = dur;
    }
    *where = 0;
    return OK;
}

static PyObject *events(PyObject *self, PyObject *args) {
    PyObject *obj[12];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO:events", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &obj[8], &obj[9], &obj[10], &obj[11]))
        return NULL;
    static const char *names[12] = {"data",   "body",        "body_end", "req_ids", "req_slot", "metadata_id",
                                    "offset_ps", "duration_ps", "kind",  "value",   "vstart",   "vend"};
    Py_buffer v[12];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 12; got++) {
        int ndim = got >= 8 ? 2 : 1;
        Py_ssize_t itemsize = got == 0 || got == 8 ? 1 : 8;
        const char *codes = got == 0 ? "Bb" : got == 8 ? "b" : INT64_CODES;
        int writable = got >= 5;
        if (get_buffer(obj[got], &v[got], names[got], ndim, itemsize, codes, writable) < 0) goto done;
    }
    const int64_t m = v[1].shape[0];
    const Py_ssize_t n_req = v[3].shape[0];
    const Py_ssize_t n_slots = v[8].shape[0], stride = v[8].shape[1];
    int shapes_ok = v[2].shape[0] == m && v[4].shape[0] == n_req && stride >= m;
    for (int j = 5; j < 8; j++) shapes_ok = shapes_ok && v[j].shape[0] >= m;
    for (int j = 9; j < 12; j++) shapes_ok = shapes_ok && v[j].shape[0] == n_slots && v[j].shape[1] == stride;
    if (!shapes_ok) {
        PyErr_SetString(PyExc_ValueError, "events: arrays of inconsistent shapes");
        goto done;
    }
    const int64_t *req_slot = (const int64_t *)v[4].buf;
    for (Py_ssize_t r = 0; r < n_req; r++) {
        if (req_slot[r] < 0 || req_slot[r] >= n_slots) {
            PyErr_SetString(PyExc_ValueError, "events: a requested slot outside the stat arrays");
            goto done;
        }
    }
    const int64_t *body = (const int64_t *)v[1].buf, *body_end = (const int64_t *)v[2].buf;
    for (int64_t i = 0; i < m; i++) {
        if (body[i] < 0 || body[i] > body_end[i] || body_end[i] > (int64_t)v[0].len) {
            PyErr_SetString(PyExc_ValueError, "events: an event body outside the data");
            goto done;
        }
    }
    Slots s = {(const int64_t *)v[3].buf, req_slot, n_req, stride,
               (int8_t *)v[8].buf, (int64_t *)v[9].buf, (int64_t *)v[10].buf, (int64_t *)v[11].buf};
    int err;
    int64_t where = 0;
    Py_BEGIN_ALLOW_THREADS
    err = decode_events((const uint8_t *)v[0].buf, body, body_end, m, &s, (int64_t *)v[5].buf,
                        (int64_t *)v[6].buf, (int64_t *)v[7].buf, &where);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(iL)", err, (long long)where);
done:
    for (int j = 0; j < got; j++) PyBuffer_Release(&v[j]);
    return result;
}

/* floor division by 1000 (as numpy's divmod): quotient, and the remainder in [0, 1000) */
static inline int64_t floor_div_1000(int64_t a, int64_t *r) {
    int64_t q = a / 1000, m = a % 1000;
    if (m < 0) {
        m += 1000;
        q -= 1;
    }
    *r = m;
    return q;
}

/* q + round_half_even(r / 1000), r in [0, 1000) */
static inline int64_t half_even(int64_t q, int64_t r) { return q + (r > 500 || (r == 500 && (q & 1))); }

static PyObject *ps_to_ns(PyObject *self, PyObject *args) {
    PyObject *obj[4];
    long long timestamp_ns;
    if (!PyArg_ParseTuple(args, "OOLOO:ps_to_ns", &obj[0], &obj[1], &timestamp_ns, &obj[2], &obj[3])) return NULL;
    static const char *names[4] = {"offset_ps", "duration_ps", "start_ns", "end_ns"};
    Py_buffer v[4];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 4; got++)
        if (get_buffer(obj[got], &v[got], names[got], 1, 8, INT64_CODES, got >= 2) < 0) goto done;
    const Py_ssize_t n = v[0].shape[0];
    if (v[1].shape[0] != n || v[2].shape[0] != n || v[3].shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "ps_to_ns: arrays of unequal length");
        goto done;
    }
    /* |result| < 2^55 before the line's time is added: the caller keeps |timestamp_ns| below 2^62 + 2^55 */
    if (timestamp_ns >= (1LL << 62) + (1LL << 55) || timestamp_ns <= -((1LL << 62) + (1LL << 55))) {
        PyErr_SetString(PyExc_ValueError, "ps_to_ns: a line time this far out could wrap around int64");
        goto done;
    }
    const int64_t *off = (const int64_t *)v[0].buf, *dur = (const int64_t *)v[1].buf;
    int64_t *start = (int64_t *)v[2].buf, *end = (int64_t *)v[3].buf;
    const int64_t ts = timestamp_ns;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        /* round_half_even(off / 1000) and round_half_even((off + dur) / 1000), never forming the sum */
        int64_t r1, r2;
        int64_t q1 = floor_div_1000(off[i], &r1), q2 = floor_div_1000(dur[i], &r2);
        int64_t s = r1 + r2; /* [0, 2000) */
        int64_t q = q1 + q2 + (s >= 1000), r = s >= 1000 ? s - 1000 : s;
        start[i] = ts + half_even(q1, r1);
        end[i] = ts + half_even(q, r);
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    for (int j = 0; j < got; j++) PyBuffer_Release(&v[j]);
    return result;
}

static PyObject *strings(PyObject *self, PyObject *args) {
    PyObject *obj[3];
    if (!PyArg_ParseTuple(args, "OOO:strings", &obj[0], &obj[1], &obj[2])) return NULL;
    static const char *names[3] = {"data", "starts", "ends"};
    Py_buffer v[3];
    int got = 0;
    PyObject *out = NULL;
    for (; got < 3; got++)
        if (get_buffer(obj[got], &v[got], names[got], 1, got ? 8 : 1, got ? INT64_CODES : "Bb", 0) < 0) goto done;
    const Py_ssize_t n = v[1].shape[0];
    const int64_t *a = (const int64_t *)v[1].buf, *b = (const int64_t *)v[2].buf;
    const char *bytes = (const char *)v[0].buf;
    if (v[2].shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "strings: starts and ends of unequal length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (a[i] < 0 || a[i] > b[i] || b[i] > (int64_t)v[0].len) {
            PyErr_SetString(PyExc_ValueError, "strings: a range outside the data");
            goto done;
        }
    }
    out = PyList_New(n);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* strict: bad UTF-8 raises UnicodeDecodeError, which the caller turns into its WireError */
        PyObject *text = PyUnicode_DecodeUTF8(bytes + a[i], (Py_ssize_t)(b[i] - a[i]), "strict");
        if (text == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, text);
    }
done:
    for (int j = 0; j < got; j++) PyBuffer_Release(&v[j]);
    return out;
}

static PyObject *py_varint(PyObject *self, PyObject *args) {
    PyObject *data_obj;
    long long pos, end;
    if (!PyArg_ParseTuple(args, "OLL:varint", &data_obj, &pos, &end)) return NULL;
    Py_buffer data;
    if (get_buffer(data_obj, &data, "data", 1, 1, "Bb", 0) < 0) return NULL;
    if (pos < 0 || end > (long long)data.len) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "varint: a range outside the data");
        return NULL;
    }
    int64_t value;
    int64_t after = varint((const uint8_t *)data.buf, pos, end, &value);
    PyBuffer_Release(&data);
    return Py_BuildValue("(LL)", (long long)value, (long long)after);
}

static PyMethodDef methods[] = {
    {"field_run", field_run, METH_VARARGS,
     "field_run(data, first, end, tag, body, body_end) -> (count, stop, error): consecutive length-delimited "
     "fields with one-byte key `tag` from `first`; their payloads' bounds go to body/body_end."},
    {"events", events, METH_VARARGS,
     "events(data, body, body_end, req_ids, req_slot, metadata_id, offset_ps, duration_ps, kind, value, vstart, "
     "vend) -> (error, event index): decode every event and put its requested stats in their slots."},
    {"ps_to_ns", ps_to_ns, METH_VARARGS,
     "ps_to_ns(offset_ps, duration_ps, timestamp_ns, start_ns, end_ns): the events' times in ns from the line's "
     "time and their int64 picosecond fields, rounded half to even (numpy's _ps_to_ns, then the line time added)."},
    {"strings", strings, METH_VARARGS,
     "strings(data, starts, ends) -> list of str: each range of the data decoded as UTF-8 (strict: raises "
     "UnicodeDecodeError), one string object each, without gathering the bytes first."},
    {"varint", py_varint, METH_VARARGS,
     "varint(data, pos, end) -> (value, position after it; -1 truncated, -2 longer than 10 bytes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_xplane_native", "Native kernels of the XPlane wire decoder (see _xplane_native.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__xplane_native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "OK", OK) < 0 || PyModule_AddIntConstant(m, "TRUNCATED_VARINT", TRUNCATED_VARINT) < 0 ||
        PyModule_AddIntConstant(m, "LONG_VARINT", LONG_VARINT) < 0 || PyModule_AddIntConstant(m, "PAST_END", PAST_END) < 0 ||
        PyModule_AddIntConstant(m, "FIELD_ZERO", FIELD_ZERO) < 0 || PyModule_AddIntConstant(m, "BAD_WIRE", BAD_WIRE) < 0 ||
        PyModule_AddIntConstant(m, "FULL", FULL) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
