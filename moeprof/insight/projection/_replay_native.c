/* The §9 replay's loops (moeprof.insight.projection.replay), in C: the graph's edges, its runs, and the sweep.
 *
 * Why C: numba's sweep is as fast once loaded, but numba costs ~1.5 s per process before its first
 * replay (its import, then loading the cached kernel and its typing registries), several times what
 * a 1M-event capture's replay costs. This module loads in about a millisecond. It is optional:
 * setup.py builds it where a C compiler is there; replay.py falls back to numba, then numpy.
 *
 * edges: per activity, in the device order (device, start, end, row), its stream predecessor and its
 * trigger: the numpy route's sorts and searches (replay._edges_numpy) as one pass with a heap.
 * runs: numbers the nodes (runs of activities joined to their stream predecessor) in the device order
 * of their first activity, and lays every run out contiguously (a counting sort).
 * sweep: replay._sweep_kernel's semantics, line for line (the tests run the routes against each
 * other): a Gauss-Seidel sweep over the nodes' start and end events in measured-time order, repeated
 * until nothing moves.
 *
 * Every index is checked before a loop follows it, so a wrong graph raises instead of reading out of
 * bounds. The loops run without the GIL.
 *
 * Lanes: s and e are (n, K) arrays; lane k replays the graph with cut[cut_of[x], k] taken off node
 * x's duration (its transfer, for an instance member): the time of the activities of x that lane
 * takes away. One pass over the graph serves K what-ifs (an opportunity each): the graph's arrays are
 * read once for all lanes.
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

/* the buffers of `count` arguments; writable: a mask over them; ndims: 1 or 2 each (NULL: all 1-d);
 * optional: a mask of those that may be None (got[j] stays 0) */
static int get_buffers(PyObject **obj, Py_buffer *v, int *got, int count, const char **names, unsigned writable,
                       const int *ndims, unsigned optional) {
    for (int j = 0; j < count; j++) {
        if (((optional >> j) & 1) && obj[j] == Py_None) continue;
        if (get_buffer(obj[j], &v[j], names[j], ndims ? ndims[j] : 1, (writable >> j) & 1) < 0) return -1;
        got[j] = 1;
    }
    return 0;
}

static void release(Py_buffer *v, const int *got, int count) {
    for (int j = 0; j < count; j++)
        if (got[j]) PyBuffer_Release(&v[j]);
}

/* ---------------------------------------------------------------- edges */

/* heap order: (end, start, row) */
static inline int before(const int64_t *end, const int64_t *start, int64_t a, int64_t b) {
    if (end[a] != end[b]) return end[a] < end[b];
    if (start[a] != start[b]) return start[a] < start[b];
    return a < b;
}

enum { E_ORDER, E_DEVICE, E_STREAM, E_START, E_END, E_STREAM_PRED, E_TRIGGER, E_N };
static const char *E_NAMES[E_N] = {"order", "device", "stream", "start", "end", "stream_pred", "trigger"};

static PyObject *edges(PyObject *self, PyObject *args) {
    PyObject *obj[E_N];
    if (!PyArg_ParseTuple(args, "OOOOOOO:edges", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5], &obj[6]))
        return NULL;
    Py_buffer v[E_N];
    int got[E_N] = {0};
    PyObject *result = NULL;
    int64_t *last = NULL, *heap = NULL;
    if (get_buffers(obj, v, got, E_N, E_NAMES, (1u << E_STREAM_PRED) | (1u << E_TRIGGER), NULL, 0) < 0) goto done;
    const Py_ssize_t n = v[E_ORDER].shape[0];
    for (int j = 0; j < E_N; j++)
        if (v[j].shape[0] != n) {
            PyErr_SetString(PyExc_ValueError, "edges: arrays of different lengths");
            goto done;
        }
    const int64_t *order = v[E_ORDER].buf, *device = v[E_DEVICE].buf, *stream = v[E_STREAM].buf;
    const int64_t *start = v[E_START].buf, *end = v[E_END].buf;
    int64_t *stream_pred = v[E_STREAM_PRED].buf, *trigger = v[E_TRIGGER].buf;
    int64_t streams = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= (int64_t)n || stream[i] < 0 || stream[i] > 4 * (int64_t)n + 1024) {
            PyErr_SetString(PyExc_ValueError, "edges: an order index or a stream code lies outside its range");
            goto done;
        }
        if (stream[i] + 1 > streams) streams = stream[i] + 1;
    }
    last = PyMem_Malloc((size_t)(streams + 1) * sizeof(int64_t));
    heap = PyMem_Malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!last || !heap) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (int64_t k = 0; k < streams; k++) last[k] = -1;
    Py_ssize_t size = 0;
    int64_t best = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t x = order[i], d = device[x];
        if (i == 0 || device[order[i - 1]] != d) { /* a new device: nothing before x */
            size = 0;
            best = -1;
        }
        /* the previous activity of x's stream on its device, when it ended by x's start */
        const int64_t y = last[stream[x]];
        const int64_t sp = (y >= 0 && device[y] == d && end[y] <= start[x]) ? y : -1;
        last[stream[x]] = x;
        /* every earlier activity that ended by x's start leaves the heap in (end, start, row) order: the
         * last one out has the latest end (ties: the later start, then the later row) */
        while (size > 0 && end[heap[0]] <= start[x]) {
            best = heap[0];
            const int64_t moved = heap[--size];
            Py_ssize_t at = 0;
            for (;;) {
                Py_ssize_t child = 2 * at + 1;
                if (child >= size) break;
                if (child + 1 < size && before(end, start, heap[child + 1], heap[child])) child++;
                if (!before(end, start, heap[child], moved)) break;
                heap[at] = heap[child];
                at = child;
            }
            heap[at] = moved;
        }
        int64_t t = best;
        if (sp >= 0 && t >= 0 && end[sp] == end[t]) t = sp; /* ties on the end: the stream predecessor */
        stream_pred[x] = sp;
        trigger[x] = t;
        Py_ssize_t at = size++;
        while (at > 0) {
            const Py_ssize_t parent = (at - 1) / 2;
            if (!before(end, start, x, heap[parent])) break;
            heap[at] = heap[parent];
            at = parent;
        }
        heap[at] = x;
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(last);
    PyMem_Free(heap);
    release(v, got, E_N);
    return result;
}

/* ---------------------------------------------------------------- runs */

enum { R_ORDER, R_JOIN, R_NODE_OF, R_RUN_ORDER, R_NODE_LO, R_N };
static const char *R_NAMES[R_N] = {"order", "join", "node_of", "run_order", "node_lo"};

static PyObject *runs(PyObject *self, PyObject *args) {
    PyObject *obj[R_N];
    if (!PyArg_ParseTuple(args, "OOOOO:runs", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4])) return NULL;
    Py_buffer v[R_N];
    int got[R_N] = {0};
    PyObject *result = NULL;
    int64_t *fill = NULL;
    unsigned writable = (1u << R_NODE_OF) | (1u << R_RUN_ORDER) | (1u << R_NODE_LO);
    if (get_buffers(obj, v, got, R_N, R_NAMES, writable, NULL, 0) < 0) goto done;
    const Py_ssize_t n = v[R_ORDER].shape[0];
    const Py_ssize_t lo_size = v[R_NODE_LO].shape[0]; /* nodes + 1, at most: the activities that join none */
    if (v[R_JOIN].shape[0] != n || v[R_NODE_OF].shape[0] != n || v[R_RUN_ORDER].shape[0] != n || lo_size < 1) {
        PyErr_SetString(PyExc_ValueError, "runs: arrays of inconsistent lengths");
        goto done;
    }
    const int64_t *order = v[R_ORDER].buf, *join = v[R_JOIN].buf;
    int64_t *node_of = v[R_NODE_OF].buf, *run_order = v[R_RUN_ORDER].buf, *node_lo = v[R_NODE_LO].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= (int64_t)n || join[i] < -1 || join[i] >= (int64_t)n) {
            PyErr_SetString(PyExc_ValueError, "runs: an index lies outside its array");
            goto done;
        }
    }
    fill = PyMem_Malloc((size_t)lo_size * sizeof(int64_t));
    if (!fill) {
        PyErr_NoMemory();
        goto done;
    }
    int bad = 0;
    int64_t m = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) node_of[i] = -1;
    for (Py_ssize_t i = 0; i < lo_size; i++) node_lo[i] = 0;
    /* a node per activity that joins none, numbered in the device order; the others take their
     * predecessor's (which comes before them in that order) */
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        const int64_t x = order[i], p = join[x];
        if (p < 0) {
            if (m + 1 >= (int64_t)lo_size) {
                bad = 2;
                break;
            }
            node_of[x] = m++;
        } else if (node_of[p] < 0) {
            bad = 1;
        } else {
            node_of[x] = node_of[p];
        }
        if (!bad) node_lo[node_of[x] + 1]++;
    }
    if (!bad) {
        for (int64_t u = 0; u < m; u++) {
            node_lo[u + 1] += node_lo[u];
            fill[u] = node_lo[u];
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            const int64_t x = order[i];
            run_order[fill[node_of[x]]++] = x;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad == 2 ? "runs: more nodes than node_lo holds"
                                                   : "runs: an activity joins one that comes after it in the device order");
        goto done;
    }
    result = PyLong_FromLongLong(m);
done:
    PyMem_Free(fill);
    release(v, got, R_N);
    return result;
}

/* ---------------------------------------------------------------- the sweep */

enum {
    ORDER, FLOOR, STREAM_PRED, TRIGGER, GAP, LAUNCH_PRED, LAUNCH_GAP, MEMBER_LO, MEMBER_K, MEMBER_ORDER,
    DURATION, TRANSFER, CUT_OF, CUT, S, E, N_ARGS
};
static const char *NAMES[N_ARGS] = {"order",     "floor",      "stream_pred", "trigger",  "gap",      "launch_pred",
                                    "launch_gap", "member_lo", "member_k",    "member_order", "duration", "transfer",
                                    "cut_of",     "cut",       "s",           "e"};

/* every index the loop follows lies in its array: the predecessors in [-1, n), the members' runs
 * within member_order, the events in [0, 2n), the cuts' rows in [-1, rows of cut) */
static int check_graph(Py_buffer *v, const int *got, Py_ssize_t n, Py_ssize_t m) {
    const int64_t *order = v[ORDER].buf;
    for (Py_ssize_t i = 0; i < 2 * n; i++)
        if (order[i] < 0 || order[i] >= 2 * (int64_t)n) return -1;
    const int64_t *preds[3] = {v[STREAM_PRED].buf, v[TRIGGER].buf, v[LAUNCH_PRED].buf};
    const int64_t *lo = v[MEMBER_LO].buf, *k = v[MEMBER_K].buf, *mo = v[MEMBER_ORDER].buf;
    const int64_t *cut_of = got[CUT_OF] ? v[CUT_OF].buf : NULL;
    const int64_t cut_rows = got[CUT] ? (int64_t)v[CUT].shape[0] : 0;
    for (Py_ssize_t x = 0; x < n; x++) {
        for (int j = 0; j < 3; j++)
            if (preds[j][x] < -1 || preds[j][x] >= (int64_t)n) return -1;
        if (lo[x] >= 0 && (k[x] < 0 || lo[x] + k[x] > (int64_t)m)) return -1;
        if (cut_of && (cut_of[x] < -1 || cut_of[x] >= cut_rows)) return -1;
    }
    for (Py_ssize_t j = 0; j < m; j++)
        if (mo[j] < 0 || mo[j] >= (int64_t)n) return -1;
    return 0;
}

static PyObject *sweep(PyObject *self, PyObject *args) {
    PyObject *obj[N_ARGS];
    long long max_passes;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOL:sweep", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &obj[8], &obj[9], &obj[10], &obj[11], &obj[12], &obj[13], &obj[14],
                          &obj[15], &max_passes))
        return NULL;
    Py_buffer v[N_ARGS];
    int got[N_ARGS] = {0};
    int ndims[N_ARGS];
    for (int j = 0; j < N_ARGS; j++) ndims[j] = (j == S || j == E || j == CUT) ? 2 : 1;
    PyObject *result = NULL;
    if (get_buffers(obj, v, got, N_ARGS, NAMES, (1u << S) | (1u << E), ndims, (1u << CUT_OF) | (1u << CUT)) < 0)
        goto done;
    const Py_ssize_t n = v[FLOOR].shape[0], m = v[MEMBER_ORDER].shape[0], lanes = v[S].shape[1];
    int bad = v[ORDER].shape[0] != 2 * n || v[S].shape[0] != n || v[E].shape[0] != n || v[E].shape[1] != lanes ||
              lanes < 1 || lanes > MAX_LANES || got[CUT_OF] != got[CUT] ||
              (got[CUT_OF] && (v[CUT_OF].shape[0] != n || v[CUT].shape[1] != lanes));
    for (int j = FLOOR; j <= TRANSFER && !bad; j++)
        if (j != MEMBER_ORDER && v[j].shape[0] != n) bad = 1;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "sweep: arrays of inconsistent shapes (or more than 64 lanes)");
        goto done;
    }
    if (check_graph(v, got, n, m) < 0) {
        PyErr_SetString(PyExc_ValueError, "sweep: an index of the graph lies outside its array");
        goto done;
    }
    const int64_t *order = v[ORDER].buf, *floor_ = v[FLOOR].buf, *stream_pred = v[STREAM_PRED].buf;
    const int64_t *trigger = v[TRIGGER].buf, *gap = v[GAP].buf, *launch_pred = v[LAUNCH_PRED].buf;
    const int64_t *launch_gap = v[LAUNCH_GAP].buf, *member_lo = v[MEMBER_LO].buf, *member_k = v[MEMBER_K].buf;
    const int64_t *member_order = v[MEMBER_ORDER].buf, *duration = v[DURATION].buf, *transfer = v[TRANSFER].buf;
    const int64_t *cut_of = got[CUT_OF] ? (const int64_t *)v[CUT_OF].buf : NULL;
    const int64_t *cut = got[CUT] ? (const int64_t *)v[CUT].buf : NULL;
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
                const int64_t *cx = (cut_of && cut_of[x] >= 0) ? cut + cut_of[x] * K : NULL;
                if (lo < 0) {
                    for (Py_ssize_t k = 0; k < K; k++) {
                        const int64_t d = duration[x] - (cx ? cx[k] : 0);
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
                        const int64_t tau = transfer[x] - (cx ? cx[k] : 0);
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
    release(v, got, N_ARGS);
    return result;
}

static PyMethodDef methods[] = {
    {"edges", edges, METH_VARARGS,
     "edges(order, device, stream, start, end, stream_pred, trigger) -> None: per activity (device order "
     "`order`), its stream predecessor and trigger (replay._edges_numpy's), written into the last two."},
    {"runs", runs, METH_VARARGS,
     "runs(order, join, node_of, run_order, node_lo) -> nodes: an activity with join[x] >= 0 is in the node of "
     "join[x] (which comes before it in `order`); writes each activity's node, the activities with every node's "
     "run contiguous, and where each node's run begins (node_lo: nodes + 1 long, the activities joining none)."},
    {"sweep", sweep, METH_VARARGS,
     "sweep(order, floor, stream_pred, trigger, gap, launch_pred, launch_gap, member_lo, member_k, member_order, "
     "duration, transfer, cut_of, cut, s, e, max_passes) -> passes: the replay's sweep over (n, K) lanes of s and "
     "e, in place; cut_of (a row of cut per node, -1 none) and cut ((rows, K), or both None): lane k takes "
     "cut[cut_of[x], k] off node x's duration (transfer, for an instance member)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_replay_native", "The §9 replay's loops in C (see _replay_native.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__replay_native(void) { return PyModule_Create(&module); }
