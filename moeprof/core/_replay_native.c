/* The §9 replay's sweep (moeprof.core.replay), in C.
 *
 * Why C: numba's sweep is as fast once loaded, but numba costs ~1.5 s per process before its first
 * replay (its import, then loading the cached kernel and its typing registries), several times what
 * a 1M-event capture's replay costs. This module loads in about a millisecond. It is optional:
 * setup.py builds it where a C compiler is there; replay.py falls back to numba, then numpy.
 *
 * Semantics are replay._sweep_kernel's, line for line (the tests run the routes against each other):
 * a Gauss-Seidel sweep over the start and end events in measured-time order, repeated until nothing
 * moves. Every index is checked before the loop, so a wrong graph raises instead of reading out of
 * bounds. The loop runs without the GIL.
 *
 * Lanes: s and e are (n, K) arrays; lane k replays the graph with the durations (transfers, for
 * instance members) of the activities whose bit k is set in `zero` taken as 0. One pass over the
 * graph serves K what-ifs (an opportunity each): the graph's arrays are read once for all lanes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NEG (INT64_MIN / 4) /* replay.NEG: "no value yet" */
#define MAX_LANES 64

static int get_buffer(PyObject *obj, Py_buffer *view, const char *what, int ndim, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    size_t length = strlen(format);
    char code = length ? format[length - 1] : '\0';
    if (view->ndim != ndim || view->itemsize != 8 || code == '\0' || strchr("lqLQ", code) == NULL) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %d-d array of 8-byte integers, got %d-d '%s'", what, ndim,
                     view->ndim, format);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

enum {
    ORDER, FLOOR, STREAM_PRED, TRIGGER, GAP, LAUNCH_PRED, LAUNCH_GAP, MEMBER_LO, MEMBER_K, MEMBER_ORDER,
    DURATION, TRANSFER, ZERO, S, E, N_ARGS
};
static const char *NAMES[N_ARGS] = {"order", "floor", "stream_pred", "trigger", "gap", "launch_pred", "launch_gap",
                                    "member_lo", "member_k", "member_order", "duration", "transfer", "zero", "s", "e"};

/* every index the loop follows lies in its array: the predecessors in [-1, n), the members' runs
 * within member_order, the events in [0, 2n) */
static int check_graph(Py_buffer *v, Py_ssize_t n, Py_ssize_t m) {
    const int64_t *order = v[ORDER].buf;
    for (Py_ssize_t i = 0; i < 2 * n; i++)
        if (order[i] < 0 || order[i] >= 2 * (int64_t)n) return -1;
    const int64_t *preds[3] = {v[STREAM_PRED].buf, v[TRIGGER].buf, v[LAUNCH_PRED].buf};
    const int64_t *lo = v[MEMBER_LO].buf, *k = v[MEMBER_K].buf, *mo = v[MEMBER_ORDER].buf;
    for (Py_ssize_t x = 0; x < n; x++) {
        for (int j = 0; j < 3; j++)
            if (preds[j][x] < -1 || preds[j][x] >= (int64_t)n) return -1;
        if (lo[x] >= 0 && (k[x] < 0 || lo[x] + k[x] > (int64_t)m)) return -1;
    }
    for (Py_ssize_t j = 0; j < m; j++)
        if (mo[j] < 0 || mo[j] >= (int64_t)n) return -1;
    return 0;
}

static PyObject *sweep(PyObject *self, PyObject *args) {
    PyObject *obj[N_ARGS];
    long long max_passes;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOL:sweep", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &obj[8], &obj[9], &obj[10], &obj[11], &obj[12], &obj[13], &obj[14],
                          &max_passes))
        return NULL;
    Py_buffer v[N_ARGS];
    int got[N_ARGS] = {0};
    PyObject *result = NULL;
    for (int j = 0; j < N_ARGS; j++) {
        if (j == ZERO && obj[j] == Py_None) continue;
        if (get_buffer(obj[j], &v[j], NAMES[j], (j == S || j == E) ? 2 : 1, j == S || j == E) < 0) goto done;
        got[j] = 1;
    }
    const Py_ssize_t n = v[FLOOR].shape[0], m = v[MEMBER_ORDER].shape[0], lanes = v[S].shape[1];
    int bad = v[ORDER].shape[0] != 2 * n || v[S].shape[0] != n || v[E].shape[0] != n || v[E].shape[1] != lanes ||
              lanes < 1 || lanes > MAX_LANES || (got[ZERO] && v[ZERO].shape[0] != n);
    for (int j = FLOOR; j <= TRANSFER && !bad; j++)
        if (j != MEMBER_ORDER && v[j].shape[0] != n) bad = 1;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "sweep: arrays of inconsistent shapes (or more than 64 lanes)");
        goto done;
    }
    if (check_graph(v, n, m) < 0) {
        PyErr_SetString(PyExc_ValueError, "sweep: an index of the graph lies outside its array");
        goto done;
    }
    const int64_t *order = v[ORDER].buf, *floor_ = v[FLOOR].buf, *stream_pred = v[STREAM_PRED].buf;
    const int64_t *trigger = v[TRIGGER].buf, *gap = v[GAP].buf, *launch_pred = v[LAUNCH_PRED].buf;
    const int64_t *launch_gap = v[LAUNCH_GAP].buf, *member_lo = v[MEMBER_LO].buf, *member_k = v[MEMBER_K].buf;
    const int64_t *member_order = v[MEMBER_ORDER].buf, *duration = v[DURATION].buf, *transfer = v[TRANSFER].buf;
    const uint64_t *zero = got[ZERO] ? (const uint64_t *)v[ZERO].buf : NULL;
    int64_t *s = v[S].buf, *e = v[E].buf;
    const Py_ssize_t K = lanes;
    long long passes = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t best[MAX_LANES];
    for (long long sweep_no = 0; sweep_no < max_passes; sweep_no++) {
        int changed = 0;
        passes = sweep_no + 1;
        for (Py_ssize_t i = 0; i < 2 * n; i++) {
            const int64_t ev = order[i], x = ev >> 1;
            int64_t *sx = s + x * K, *ex = e + x * K;
            if ((ev & 1) == 0) {
                const int64_t p = stream_pred[x], t = trigger[x], w = launch_pred[x];
                for (Py_ssize_t k = 0; k < K; k++) {
                    int64_t val = floor_[x];
                    if (p >= 0 && e[p * K + k] > val) val = e[p * K + k];
                    if (t >= 0 && e[t * K + k] + gap[x] > val) val = e[t * K + k] + gap[x];
                    if (w >= 0 && e[w * K + k] + launch_gap[x] > val) val = e[w * K + k] + launch_gap[x];
                    if (val != sx[k]) {
                        sx[k] = val;
                        changed = 1;
                    }
                }
            } else {
                const int64_t lo = member_lo[x];
                const uint64_t bits = zero ? zero[x] : 0;
                if (lo < 0) {
                    for (Py_ssize_t k = 0; k < K; k++) {
                        const int64_t d = (bits >> k) & 1 ? 0 : duration[x];
                        const int64_t val = sx[k] > NEG ? sx[k] + d : NEG;
                        if (val != ex[k]) {
                            ex[k] = val;
                            changed = 1;
                        }
                    }
                } else {
                    for (Py_ssize_t k = 0; k < K; k++) best[k] = NEG;
                    for (int64_t j = lo; j < lo + member_k[x]; j++) {
                        const int64_t *sm = s + member_order[j] * K;
                        for (Py_ssize_t k = 0; k < K; k++)
                            if (sm[k] > best[k]) best[k] = sm[k];
                    }
                    for (Py_ssize_t k = 0; k < K; k++) {
                        const int64_t tau = (bits >> k) & 1 ? 0 : transfer[x];
                        const int64_t val = best[k] > NEG ? best[k] + tau : NEG;
                        if (val != ex[k]) {
                            ex[k] = val;
                            changed = 1;
                        }
                    }
                }
            }
        }
        if (!changed && sweep_no > 0) break;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLongLong(passes);
done:
    for (int j = 0; j < N_ARGS; j++)
        if (got[j]) PyBuffer_Release(&v[j]);
    return result;
}

static PyMethodDef methods[] = {
    {"sweep", sweep, METH_VARARGS,
     "sweep(order, floor, stream_pred, trigger, gap, launch_pred, launch_gap, member_lo, member_k, member_order, "
     "duration, transfer, zero, s, e, max_passes) -> passes: the replay's sweep over (n, K) lanes of s and e, in "
     "place; zero (uint64 per activity, or None): bit k set takes the activity's duration (transfer) as 0 in lane k."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_replay_native", "The §9 replay's sweep in C (see _replay_native.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__replay_native(void) { return PyModule_Create(&module); }
