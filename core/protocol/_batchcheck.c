/* The header checks of a produced batch (brokkr.core.validation's _single_batch and
 * _check_header), in C.
 *
 * Every Produce request pays for them, once per partition: in Python they are a generator,
 * a list, a dozen attribute reads and a named tuple, about 3 us; here they are one call.
 * The call never decides an error itself: it answers the batch's header when the records
 * hold exactly one batch that passes every check, and None otherwise, and the Python checks
 * then run to word the error Kafka would answer. tests/test_validation.py compares the two
 * on valid and damaged batches: C accepts exactly what Python accepts.
 *
 * Left to the caller: whether the broker has the batch's codec.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define LOG_OVERHEAD 12
#define HEADER_SIZE 61
#define HEADER_FIELDS 14 /* BatchHeader: position, then the 13 fields of the header */
#define ATTRIBUTES_OFFSET 21
#define CODEC_MASK 0x07
#define CONTROL_FLAG 0x20
#define ZSTD_ID 4
#define ZSTD_MIN_PRODUCE_VERSION 7

static PyObject *crc32c_function; /* crc32c.crc32c, imported once */

static int64_t
be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static int32_t
be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static int16_t
be16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/* 1 when the CRC-32C of buf[ATTRIBUTES_OFFSET:len] is `expected`, 0 when not, -1 on error. */
static int
crc_matches(const unsigned char *buf, Py_ssize_t len, uint32_t expected)
{
    PyObject *section = PyMemoryView_FromMemory((char *)buf + ATTRIBUTES_OFFSET, len - ATTRIBUTES_OFFSET, PyBUF_READ);
    if (section == NULL)
        return -1;
    PyObject *crc = PyObject_CallOneArg(crc32c_function, section);
    Py_DECREF(section);
    if (crc == NULL)
        return -1;
    unsigned long value = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    return value == expected;
}

/* A BatchHeader (a named tuple, so a tuple subtype) at position 0 from the header fields. */
static PyObject *
new_header(PyTypeObject *type, const unsigned char *buf)
{
    long long fields[HEADER_FIELDS] = {
        0,                        /* position */
        be64(buf),                /* base_offset */
        be32(buf + 8),            /* batch_length */
        be32(buf + 12),           /* leader_epoch */
        (signed char)buf[16],     /* magic */
        (uint32_t)be32(buf + 17), /* crc, unsigned */
        be16(buf + 21),           /* attributes */
        be32(buf + 23),           /* last_offset_delta */
        be64(buf + 27),           /* base_timestamp */
        be64(buf + 35),           /* max_timestamp */
        be64(buf + 43),           /* producer_id */
        be16(buf + 51),           /* producer_epoch */
        be32(buf + 53),           /* base_sequence */
        be32(buf + 57),           /* record_count */
    };
    PyObject *header = type->tp_alloc(type, HEADER_FIELDS);
    if (header == NULL)
        return NULL;
    for (int i = 0; i < HEADER_FIELDS; i++) {
        PyObject *value = PyLong_FromLongLong(fields[i]);
        if (value == NULL) {
            Py_DECREF(header);
            return NULL;
        }
        PyTuple_SET_ITEM(header, i, value);
    }
    return header;
}

PyDoc_STRVAR(check_doc,
"check(records, api_version, max_message_bytes, header_type)\n\n"
"The header (a ``header_type``, BatchHeader) of the one batch ``records`` holds, when it\n"
"passes every check of validation's _single_batch and _check_header but the codec's;\n"
"None when it fails any (the Python checks then say which).");

static PyObject *
check(PyObject *module, PyObject *args)
{
    Py_buffer view;
    int api_version;
    long long max_message_bytes;
    PyObject *type;
    if (!PyArg_ParseTuple(args, "y*iLO", &view, &api_version, &max_message_bytes, &type))
        return NULL;
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "header_type must be a tuple subtype");
        return NULL;
    }
    const unsigned char *buf = view.buf;
    Py_ssize_t len = view.len;
    PyObject *result = Py_None;
    /* _single_batch: one whole magic-2 batch, exactly the records; zstd only from Produce v7 */
    if (len < HEADER_SIZE)
        goto done;
    int32_t batch_length = be32(buf + 8);
    if (batch_length < HEADER_SIZE - LOG_OVERHEAD || (Py_ssize_t)batch_length + LOG_OVERHEAD != len || buf[16] != 2)
        goto done;
    int16_t attributes = be16(buf + ATTRIBUTES_OFFSET);
    if ((attributes & CODEC_MASK) == ZSTD_ID && api_version < ZSTD_MIN_PRODUCE_VERSION)
        goto done;
    /* _check_header, but for the codec */
    int32_t last_offset_delta = be32(buf + 23), record_count = be32(buf + 57);
    if (be64(buf) != 0 || (long long)len > max_message_bytes || last_offset_delta < 0 || record_count <= 0 ||
        (int64_t)record_count != (int64_t)last_offset_delta + 1 || attributes & CONTROL_FLAG ||
        (be64(buf + 43) != -1 && be32(buf + 53) < 0))
        goto done;
    int crc = crc_matches(buf, len, (uint32_t)be32(buf + 17));
    if (crc < 0)
        result = NULL;
    else if (crc)
        result = new_header((PyTypeObject *)type, buf);
done:
    PyBuffer_Release(&view);
    if (result == Py_None)
        Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"check", check, METH_VARARGS, check_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_batchcheck", "The header checks of a produced batch, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__batchcheck(void)
{
    PyObject *crc32c = PyImport_ImportModule("crc32c");
    if (crc32c == NULL)
        return NULL;
    crc32c_function = PyObject_GetAttrString(crc32c, "crc32c");
    Py_DECREF(crc32c);
    if (crc32c_function == NULL)
        return NULL;
    return PyModule_Create(&module);
}
