/* The record walk of brokkr.core.protocol.records.scan_records_untrusted, in C.
 *
 * Walking the records of a compressed batch is the cost of every record a compressed
 * produce carries (Kafka walks them too); in Python it is about 2 us a record. This walk
 * reads the same fields, checks the same bounds and fills the same arrays, in a few
 * nanoseconds a record, and can run without the GIL, so several walks run on several
 * cores in one process. The same walk, writing nothing (check), is what an uncompressed
 * batch's records cost validation: exactly the records its header counts, with offset
 * deltas 0..n-1 (records.py's check_records_c).
 *
 * It never decides an error itself: on anything it does not accept it answers None (check:
 * False) and the Python walk runs instead, to accept or refuse with its own message. So it
 * may be stricter than the Python walk, never more lenient; tests/protocol/test_records.py
 * compares the two on valid and damaged batches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* An unsigned LEB128 varint of at most max_bytes at *pos, below end, zigzag-decoded.
 * Fails (returns 0) past end, past max_bytes, and past 64 bits. */
static inline int
read_varint(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int64_t *out)
{
    uint64_t value = 0;
    Py_ssize_t p = *pos;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end)
            return 0;
        unsigned char b = buf[p++];
        if (i == 9 && (b & 0x7e))
            return 0; /* bits past 64: left to the Python walk */
        value |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *pos = p;
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return 1;
        }
    }
    return 0;
}

#define VARINT(pos, end, out) read_varint(buf, (pos), (end), 5, (out))
#define VARLONG(pos, end, out) read_varint(buf, (pos), (end), 10, (out))

typedef struct {
    Py_ssize_t keyless_count;
    int sequential;
    int64_t min_timestamp, max_timestamp; /* of the deltas; 0 for no records */
} summary;

/* The walk itself, on plain memory: 1 when every record is well formed and they fill the
 * section exactly, else 0. The three arrays are written when given; NULL ones are not
 * (a walk that only checks: check below). */
static int
walk(const unsigned char *buf, Py_ssize_t end, Py_ssize_t count, int64_t *timestamps, int64_t *offsets,
     int64_t *keyless, summary *out)
{
    Py_ssize_t pos = 0, nkeyless = 0;
    int seq = 1;
    int64_t length, n, timestamp, offset, low = INT64_MAX, high = INT64_MIN;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (!VARINT(&pos, end, &length) || length < 1 || length > end - pos)
            return 0;
        Py_ssize_t stop = pos + (Py_ssize_t)length;
        pos += 1; /* the attributes byte, unused in v2 */
        if (!VARLONG(&pos, stop, &timestamp) || !VARINT(&pos, stop, &offset))
            return 0;
        if (timestamps != NULL) {
            timestamps[index] = timestamp;
            offsets[index] = offset;
        }
        if (offset != index)
            seq = 0;
        if (timestamp < low)
            low = timestamp;
        if (timestamp > high)
            high = timestamp;
        for (int field = 0; field < 2; field++) { /* key, value */
            if (!VARINT(&pos, stop, &n))
                return 0;
            if (n < 0) {
                if (field == 0 && keyless != NULL)
                    keyless[nkeyless++] = index;
            }
            else if (n > stop - pos)
                return 0;
            else
                pos += (Py_ssize_t)n;
        }
        if (!VARINT(&pos, stop, &n) || n < 0 || n > stop - pos)
            return 0;
        for (int64_t h = 0; h < n; h++) {
            int64_t size;
            if (!VARINT(&pos, stop, &size) || size < 0 || size > stop - pos) /* a null header key too */
                return 0;
            pos += (Py_ssize_t)size;
            if (!VARINT(&pos, stop, &size) || size > stop - pos)
                return 0;
            if (size > 0)
                pos += (Py_ssize_t)size;
        }
        if (pos != stop)
            return 0;
    }
    if (pos != end)
        return 0;
    out->keyless_count = nkeyless;
    out->sequential = seq;
    out->min_timestamp = count ? low : 0;
    out->max_timestamp = count ? high : 0;
    return 1;
}

static int
int64_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t count, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return 0;
    if (view->itemsize != 8 || view->format == NULL || (strcmp(view->format, "q") && strcmp(view->format, "l")) ||
        view->len < count * 8) {
        PyErr_Format(PyExc_ValueError, "%s must be a writable int64 buffer of at least %zd items", name, count);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(scan_doc,
"scan(payload, count, timestamp_deltas, offset_deltas, keyless, release_gil)\n\n"
"Walk ``count`` records of a decompressed records section, writing each record's\n"
"timestamp and offset deltas and the indexes of the keyless records into the three\n"
"int64 buffers (each of at least ``count`` items). Returns (keyless count, whether the\n"
"offset deltas are 0..count-1, the smallest and the largest timestamp delta; 0 and 0\n"
"for no records), or None when the section is not one this walk accepts\n"
"(the Python walk then decides). ``release_gil``: walk without the GIL (from a worker\n"
"thread; on the event loop it would wait for the GIL back).");

static PyObject *
scan(PyObject *module, PyObject *args)
{
    Py_buffer payload, timestamps, offsets, keyless;
    Py_ssize_t count;
    summary found;
    int release, ok;
    PyObject *ts_obj, *off_obj, *keyless_obj;
    if (!PyArg_ParseTuple(args, "y*nOOOp", &payload, &count, &ts_obj, &off_obj, &keyless_obj, &release))
        return NULL;
    if (count < 0 || count > PY_SSIZE_T_MAX / 8) {
        PyBuffer_Release(&payload);
        PyErr_SetString(PyExc_ValueError, "count out of range");
        return NULL;
    }
    if (!int64_buffer(ts_obj, &timestamps, count, "timestamp_deltas")) {
        PyBuffer_Release(&payload);
        return NULL;
    }
    if (!int64_buffer(off_obj, &offsets, count, "offset_deltas")) {
        PyBuffer_Release(&timestamps);
        PyBuffer_Release(&payload);
        return NULL;
    }
    if (!int64_buffer(keyless_obj, &keyless, count, "keyless")) {
        PyBuffer_Release(&offsets);
        PyBuffer_Release(&timestamps);
        PyBuffer_Release(&payload);
        return NULL;
    }
    if (release) {
        Py_BEGIN_ALLOW_THREADS
        ok = walk(payload.buf, payload.len, count, timestamps.buf, offsets.buf, keyless.buf, &found);
        Py_END_ALLOW_THREADS
    }
    else
        ok = walk(payload.buf, payload.len, count, timestamps.buf, offsets.buf, keyless.buf, &found);
    PyBuffer_Release(&keyless);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&timestamps);
    PyBuffer_Release(&payload);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(nOLL)", found.keyless_count, found.sequential ? Py_True : Py_False,
                         (long long)found.min_timestamp, (long long)found.max_timestamp);
}

PyDoc_STRVAR(check_doc,
"check(payload, count)\n\n"
"Whether an uncompressed records section holds exactly ``count`` well-formed records,\n"
"with offset deltas 0..count-1, that fill it: scan's walk, writing nothing, for the\n"
"batches validation otherwise settles from their header. False for anything else (the\n"
"Python walk then says what is wrong).");

static PyObject *
check(PyObject *module, PyObject *args)
{
    Py_buffer payload;
    Py_ssize_t count;
    summary found;
    if (!PyArg_ParseTuple(args, "y*n", &payload, &count))
        return NULL;
    /* each record takes two bytes at least: a count the bytes cannot hold fails on them */
    int ok = count >= 0 && walk(payload.buf, payload.len, count, NULL, NULL, NULL, &found) && found.sequential;
    PyBuffer_Release(&payload);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"check", check, METH_VARARGS, check_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_recordscan", "The record walk of scan_records_untrusted, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__recordscan(void)
{
    return PyModule_Create(&module);
}
