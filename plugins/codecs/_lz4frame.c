/* The lz4 codec's decompress_into in C: one LZ4 frame decompressed into a bytearray with
 * liblz4's frame API, letting go of the GIL once while the output fits.
 *
 * Through python-lz4 (lz4.frame.decompress_chunk), a frame is decompressed a block at a
 * time, each call letting go of the GIL and taking it back. An offload thread doing that
 * beside a busy event loop waits for the GIL at every block: a megabyte of Kafka's 64 KiB
 * blocks is sixteen hand-overs, each costing the loop's thread context switches, and the
 * worker decompressed at 50 MB/s instead of 2.6 GB/s. Here the whole frame is one call
 * while the output fits in the buffer, which walk after walk keeps (compression.Scratch);
 * the buffer grows, with the GIL held, only when it is too short.
 *
 * The frame's bytes come from untrusted producers. liblz4 checks every bound of its
 * input; the output stops at `limit` bytes (the caller's bound plus one, so that stopping
 * there tells "too large"), and the buffer grows to at most that.
 *
 * The Python version in plugins/codecs/lz4.py stays, for installs without the compiler or
 * liblz4's headers; tests/test_codecs.py holds the two to the same output and errors.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <lz4frame.h>

/* The smallest growth of the output buffer: one of Kafka's blocks. */
#define MIN_GROWTH (64 * 1024)

/* decompress_into(data, out, limit) -> (size, ended, read)
 *
 * Decompresses the frame at the start of `data` into the bytearray `out`, from its start,
 * until the frame ends, the input runs out, or `limit` bytes are written (limit < 0: no
 * limit). Returns the bytes written, whether the frame ended, and the input bytes read.
 * Raises ValueError for bytes that are not an LZ4 frame (liblz4's error name). */
static PyObject *
decompress_into(PyObject *self, PyObject *args)
{
    Py_buffer data;
    PyObject *out;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "y*Yn", &data, &out, &limit))
        return NULL;
    if (limit < 0)
        limit = PY_SSIZE_T_MAX;

    LZ4F_dctx *context = NULL;
    LZ4F_errorCode_t created = LZ4F_createDecompressionContext(&context, LZ4F_VERSION);
    if (LZ4F_isError(created)) {
        PyBuffer_Release(&data);
        return PyErr_NoMemory();
    }

    const char *src = data.buf;
    Py_ssize_t read = 0, size = 0;
    size_t result = 1; /* liblz4's hint of bytes still to read; 0 once the frame ended */
    int stuck = 0;
    while (result != 0 && size < limit && !stuck) {
        Py_ssize_t capacity = PyByteArray_GET_SIZE(out);
        if (size == capacity) { /* full: grow, at least doubling, to at most the limit */
            Py_ssize_t wanted = capacity < MIN_GROWTH ? MIN_GROWTH : 2 * capacity;
            if (wanted > limit || wanted < capacity)
                wanted = limit;
            if (PyByteArray_Resize(out, wanted) < 0)
                goto failed;
            capacity = wanted;
        }
        Py_buffer held; /* nobody resizes `out` while the GIL is let go */
        if (PyObject_GetBuffer(out, &held, PyBUF_WRITABLE) < 0)
            goto failed;
        Py_ssize_t room = (capacity < limit ? capacity : limit);
        char *dst = held.buf;
        Py_BEGIN_ALLOW_THREADS
        while (result != 0 && size < room) {
            size_t taken = (size_t)(data.len - read);
            size_t written = (size_t)(room - size);
            result = LZ4F_decompress(context, dst + size, &written, src + read, &taken, NULL);
            if (LZ4F_isError(result))
                break;
            read += (Py_ssize_t)taken;
            size += (Py_ssize_t)written;
            if (taken == 0 && written == 0) { /* the input ran out inside the frame */
                stuck = 1;
                break;
            }
        }
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&held);
        if (LZ4F_isError(result)) {
            PyErr_SetString(PyExc_ValueError, LZ4F_getErrorName(result));
            goto failed;
        }
    }
    LZ4F_freeDecompressionContext(context);
    PyBuffer_Release(&data);
    return Py_BuildValue("nOn", size, result == 0 ? Py_True : Py_False, read);

failed:
    LZ4F_freeDecompressionContext(context);
    PyBuffer_Release(&data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decompress_into", decompress_into, METH_VARARGS,
     "decompress_into(data, out, limit) -> (size, ended, read): an LZ4 frame into a bytearray."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_lz4frame", "The lz4 codec's decompression, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__lz4frame(void)
{
    return PyModule_Create(&module);
}
