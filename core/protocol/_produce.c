/* The hot parts of a Produce request in C: reading the request (produce_codec's
 * _decode_common), the header checks of each partition's batch (validation's
 * _single_batch and _check_header), and writing the common answer (produce_codec's
 * encode_response).
 *
 * Every Produce request pays for all three, the checks once per partition: in Python they
 * are loops of slices, unpacks and packs, a generator, a list, dozens of attribute reads
 * and a named tuple, about 7 us a request; here they are a call each. None of them decides
 * an error itself: each answers None (the writer False) for anything it does not accept,
 * and the Python code then runs to accept it or to word the error Kafka would answer.
 * tests/test_produce_codec.py and tests/test_validation.py compare the two on valid and
 * broken input: C accepts exactly what Python accepts, with the same result.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

/* -- the header checks of a produced batch ------------------------------------------------ */

PyDoc_STRVAR(check_batch_doc,
"check_batch(records, api_version, max_message_bytes, header_type)\n\n"
"The header (a ``header_type``, BatchHeader) of the one batch ``records`` holds, when it\n"
"passes every check of validation's _single_batch and _check_header but the codec's;\n"
"None when it fails any (the Python checks then say which).");

static PyObject *
check_batch(PyObject *module, PyObject *args)
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

/* -- reading a Produce request ------------------------------------------------------------ */

static PyObject *partition_kwnames, *topic_kwnames, *request_kwnames; /* the structs' field names */
static PyObject *str_buf, *str_pos, *str_end;

/* A compact string of length + 1 = n (n > 0) at p: str, or NULL with no error set when its
 * bytes are not UTF-8 (the caller answers None). */
static PyObject *
utf8(const unsigned char *p, Py_ssize_t n)
{
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        PyErr_Clear();
    return s;
}

/* The unsigned varint of at most 5 bytes at *pos, below end: 1, or 0 when it is not one. */
static int
uvarint5(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    int64_t value = 0;
    Py_ssize_t p = *pos;
    for (int i = 0; i < 5; i++) {
        if (p >= end)
            return 0;
        unsigned char b = buf[p++];
        value |= (int64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *pos = p;
            *out = value;
            return 1;
        }
    }
    return 0;
}

/* Append cls(a, b), its two fields given by name (kwnames), to list: 0, or -1 on error. */
static int
append_new(PyObject *list, PyObject *cls, PyObject *a, PyObject *b, PyObject *kwnames)
{
    PyObject *args[2] = {a, b};
    PyObject *item = PyObject_Vectorcall(cls, args, 0, kwnames);
    if (item == NULL)
        return -1;
    int appended = PyList_Append(list, item);
    Py_DECREF(item);
    return appended;
}

/* The topics of a request whose fixed part ends at *pos; NULL with an error set on failure,
 * without one when the bytes are not what the common shape allows. */
static PyObject *
read_topics(PyObject *buf_obj, const unsigned char *buf, Py_ssize_t *pos_io, Py_ssize_t end, Py_ssize_t n_topics,
            PyObject *topic_cls, PyObject *partition_cls)
{
    Py_ssize_t pos = *pos_io;
    PyObject *topics = PyList_New(0);
    if (topics == NULL)
        return NULL;
    for (Py_ssize_t t = 0; t < n_topics - 1; t++) {
        if (pos >= end || buf[pos] == 0 || buf[pos] >= 0x80)
            goto drop;
        Py_ssize_t n = buf[pos];
        if (pos + n > end)
            goto drop;
        PyObject *name = utf8(buf + pos + 1, n - 1);
        if (name == NULL)
            goto drop;
        pos += n;
        int64_t n_partitions; /* any size: 1,000 partitions take two bytes */
        if (!uvarint5(buf, &pos, end, &n_partitions) || n_partitions == 0 || n_partitions - 1 > end - pos) {
            Py_DECREF(name);
            goto drop;
        }
        PyObject *partitions = PyList_New(0);
        if (partitions == NULL) {
            Py_DECREF(name);
            goto drop;
        }
        for (int64_t i = 0; i < n_partitions - 1; i++) {
            int64_t size;
            if (pos + 4 > end)
                goto drop_topic;
            PyObject *index = PyLong_FromLong(be32(buf + pos));
            if (index == NULL)
                goto drop_topic;
            pos += 4;
            if (!uvarint5(buf, &pos, end, &size) || size == 0 || pos + size - 1 >= end || buf[pos + size - 1] != 0) {
                Py_DECREF(index);
                goto drop_topic; /* null records, or tagged fields after them */
            }
            PyObject *records = PySequence_GetSlice(buf_obj, pos, pos + (Py_ssize_t)size - 1);
            if (records == NULL) {
                Py_DECREF(index);
                goto drop_topic;
            }
            pos += (Py_ssize_t)size;
            int appended = append_new(partitions, partition_cls, index, records, partition_kwnames);
            Py_DECREF(index);
            Py_DECREF(records);
            if (appended < 0)
                goto drop_topic;
        }
        if (pos >= end || buf[pos] != 0) /* the topic's tagged fields: none */
            goto drop_topic;
        pos++;
        int appended = append_new(topics, topic_cls, name, partitions, topic_kwnames);
        Py_DECREF(name);
        Py_DECREF(partitions);
        if (appended < 0)
            goto drop;
        continue;
    drop_topic:
        Py_DECREF(name);
        Py_DECREF(partitions);
        goto drop;
    }
    *pos_io = pos;
    return topics;
drop: /* the caller tells failure from "not the common shape" by PyErr_Occurred */
    Py_DECREF(topics);
    return NULL;
}

PyDoc_STRVAR(read_request_doc,
"read_request(reader, request_type, topic_type, partition_type)\n\n"
"The ProduceRequest at ``reader``'s position, as flexible versions by name (9-12) carry\n"
"it from clients (one-byte topic counts and names, no tagged fields), built of the three\n"
"types; ``reader`` moves past it. None, ``reader`` untouched, for anything else.");

static PyObject *
read_request(PyObject *module, PyObject *args)
{
    PyObject *reader, *request_cls, *topic_cls, *partition_cls;
    if (!PyArg_ParseTuple(args, "OOOO", &reader, &request_cls, &topic_cls, &partition_cls))
        return NULL;
    PyObject *buf_obj = PyObject_GetAttr(reader, str_buf);
    if (buf_obj == NULL)
        return NULL;
    Py_ssize_t pos, end;
    PyObject *pos_obj = PyObject_GetAttr(reader, str_pos), *end_obj = PyObject_GetAttr(reader, str_end);
    if (pos_obj == NULL || end_obj == NULL) {
        Py_XDECREF(pos_obj);
        Py_XDECREF(end_obj);
        Py_DECREF(buf_obj);
        return NULL;
    }
    pos = PyLong_AsSsize_t(pos_obj);
    end = PyLong_AsSsize_t(end_obj);
    Py_DECREF(pos_obj);
    Py_DECREF(end_obj);
    if ((pos == -1 || end == -1) && PyErr_Occurred()) {
        Py_DECREF(buf_obj);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buf_obj, &view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(buf_obj);
        return NULL;
    }
    const unsigned char *buf = view.buf;
    if (end > view.len)
        end = view.len;
    PyObject *result = NULL, *transactional_id = NULL, *topics = NULL;
    if (pos < 0 || pos >= end || buf[pos] >= 0x80) /* transactional id: compact nullable string */
        goto none;
    Py_ssize_t n = buf[pos];
    if (n == 0) {
        transactional_id = Py_NewRef(Py_None);
        pos += 1;
    }
    else {
        if (pos + n > end)
            goto none;
        transactional_id = utf8(buf + pos + 1, n - 1);
        if (transactional_id == NULL)
            goto none_or_fail;
        pos += n;
    }
    if (pos + 7 > end)
        goto none;
    int16_t acks = be16(buf + pos);
    int32_t timeout_ms = be32(buf + pos + 2);
    Py_ssize_t n_topics = buf[pos + 6];
    pos += 7;
    if (n_topics == 0 || n_topics >= 0x80)
        goto none;
    topics = read_topics(buf_obj, buf, &pos, end, n_topics, topic_cls, partition_cls);
    if (topics == NULL)
        goto none_or_fail;
    if (pos >= end || buf[pos] != 0) /* the request's tagged fields: none */
        goto none;
    pos++;
    PyObject *acks_obj = PyLong_FromLong(acks), *timeout_obj = PyLong_FromLong(timeout_ms);
    if (acks_obj == NULL || timeout_obj == NULL) {
        Py_XDECREF(acks_obj);
        Py_XDECREF(timeout_obj);
        goto fail;
    }
    PyObject *fields[4] = {transactional_id, acks_obj, timeout_obj, topics};
    result = PyObject_Vectorcall(request_cls, fields, 0, request_kwnames);
    Py_DECREF(acks_obj);
    Py_DECREF(timeout_obj);
    if (result != NULL) {
        PyObject *new_pos = PyLong_FromSsize_t(pos);
        if (new_pos == NULL || PyObject_SetAttr(reader, str_pos, new_pos) < 0)
            Py_CLEAR(result);
        Py_XDECREF(new_pos);
    }
    goto done;
none_or_fail:
    if (PyErr_Occurred())
        goto fail;
none:
    result = Py_NewRef(Py_None);
fail:
done:
    Py_XDECREF(transactional_id);
    Py_XDECREF(topics);
    PyBuffer_Release(&view);
    Py_DECREF(buf_obj);
    return result;
}

/* -- writing a Produce response ----------------------------------------------------------- */

static PyObject *str_responses, *str_node_endpoints, *str_name, *str_partition_responses, *str_index,
    *str_error_code, *str_base_offset, *str_log_append_time_ms, *str_log_start_offset, *str_error_message,
    *str_record_errors, *str_current_leader, *str_leader_id, *str_leader_epoch, *str_throttle_time_ms;

typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
    unsigned char small[512];
} Out;

static int
reserve(Out *out, Py_ssize_t n)
{
    if (out->len + n <= out->cap)
        return 1;
    Py_ssize_t cap = (out->len + n) * 2;
    unsigned char *p = PyMem_Malloc(cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    memcpy(p, out->p, out->len);
    if (out->p != out->small)
        PyMem_Free(out->p);
    out->p = p;
    out->cap = cap;
    return 1;
}

static void
put_be(Out *out, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        out->p[out->len++] = (unsigned char)(v >> (8 * i));
}

static void
put_uvarint(Out *out, uint64_t v)
{
    while (v >= 0x80) {
        out->p[out->len++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out->p[out->len++] = (unsigned char)v;
}

/* An int attribute of obj within [lo, hi]: 1, 0 when it is not one (no error set), -1 on error. */
static int
int_attr(PyObject *obj, PyObject *name, long long lo, long long hi, long long *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int ok = 0;
    if (PyLong_Check(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred()) {
            Py_DECREF(v);
            return -1;
        }
        ok = !overflow && x >= lo && x <= hi;
        *out = x;
    }
    Py_DECREF(v);
    return ok;
}

/* 1 when the list attribute `name` of obj is empty, 0 when not (or not a list), -1 on error. */
static int
empty_list_attr(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int empty = PyList_Check(v) && PyList_GET_SIZE(v) == 0;
    Py_DECREF(v);
    return empty;
}

/* One partition answer with no message, no record errors and no leader hint. */
static int
write_partition(Out *out, PyObject *p)
{
    long long index, code, base_offset, append_time, start_offset, leader_id, leader_epoch;
    int ok;
    if ((ok = int_attr(p, str_index, INT32_MIN, INT32_MAX, &index)) != 1 ||
        (ok = int_attr(p, str_error_code, INT16_MIN, INT16_MAX, &code)) != 1 ||
        (ok = int_attr(p, str_base_offset, INT64_MIN, INT64_MAX, &base_offset)) != 1 ||
        (ok = int_attr(p, str_log_append_time_ms, INT64_MIN, INT64_MAX, &append_time)) != 1 ||
        (ok = int_attr(p, str_log_start_offset, INT64_MIN, INT64_MAX, &start_offset)) != 1 ||
        (ok = empty_list_attr(p, str_record_errors)) != 1)
        return ok;
    PyObject *message = PyObject_GetAttr(p, str_error_message);
    if (message == NULL)
        return -1;
    Py_DECREF(message);
    if (message != Py_None)
        return 0;
    PyObject *leader = PyObject_GetAttr(p, str_current_leader);
    if (leader == NULL)
        return -1;
    if (leader == Py_None) {
        Py_DECREF(leader);
        return 0;
    }
    ok = int_attr(leader, str_leader_id, -1, -1, &leader_id);
    if (ok == 1)
        ok = int_attr(leader, str_leader_epoch, -1, -1, &leader_epoch);
    Py_DECREF(leader);
    if (ok != 1)
        return ok;
    if (!reserve(out, 4 + 2 + 8 * 3 + 3))
        return -1;
    put_be(out, (uint64_t)index, 4);
    put_be(out, (uint64_t)code, 2);
    put_be(out, (uint64_t)base_offset, 8);
    put_be(out, (uint64_t)append_time, 8);
    put_be(out, (uint64_t)start_offset, 8);
    out->p[out->len++] = 1; /* record errors: an empty compact array */
    out->p[out->len++] = 0; /* error message: a null compact string */
    out->p[out->len++] = 0; /* no tagged fields */
    return 1;
}

static int
write_topic(Out *out, PyObject *t)
{
    PyObject *name = PyObject_GetAttr(t, str_name);
    if (name == NULL)
        return -1;
    if (!PyUnicode_Check(name)) {
        Py_DECREF(name);
        return 0;
    }
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(name, &size);
    if (utf8 == NULL || !reserve(out, 10 + size)) {
        Py_DECREF(name);
        if (utf8 == NULL && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) { /* lone surrogates */
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    put_uvarint(out, (uint64_t)size + 1);
    memcpy(out->p + out->len, utf8, size);
    out->len += size;
    Py_DECREF(name);
    PyObject *partitions = PyObject_GetAttr(t, str_partition_responses);
    if (partitions == NULL)
        return -1;
    int ok = PyList_Check(partitions);
    if (ok) {
        Py_ssize_t n = PyList_GET_SIZE(partitions);
        if (!reserve(out, 10)) {
            Py_DECREF(partitions);
            return -1;
        }
        put_uvarint(out, (uint64_t)n + 1);
        for (Py_ssize_t i = 0; i < n && ok == 1; i++)
            ok = write_partition(out, PyList_GET_ITEM(partitions, i));
    }
    Py_DECREF(partitions);
    if (ok == 1) {
        if (!reserve(out, 1))
            return -1;
        out->p[out->len++] = 0; /* the topic's tagged fields */
    }
    return ok;
}

PyDoc_STRVAR(write_response_doc,
"write_response(response, buf)\n\n"
"Append ``response`` (a ProduceResponse) to the bytearray ``buf`` as flexible versions\n"
"by name (9-12) carry it, and answer True, when it is the common answer: no leader hints\n"
"(KIP-951), and no partition with an error message or record errors. Anything else: False,\n"
"``buf`` untouched.");

static PyObject *
write_response(PyObject *module, PyObject *args)
{
    PyObject *response, *buf;
    if (!PyArg_ParseTuple(args, "OO!", &response, &PyByteArray_Type, &buf))
        return NULL;
    Out out = {.len = 0, .cap = sizeof(out.small)};
    out.p = out.small;
    int ok = empty_list_attr(response, str_node_endpoints);
    PyObject *topics = NULL;
    if (ok == 1) {
        topics = PyObject_GetAttr(response, str_responses);
        if (topics == NULL)
            ok = -1;
        else if (!PyList_Check(topics))
            ok = 0;
    }
    if (ok == 1) {
        Py_ssize_t n = PyList_GET_SIZE(topics);
        put_uvarint(&out, (uint64_t)n + 1);
        for (Py_ssize_t i = 0; i < n && ok == 1; i++)
            ok = write_topic(&out, PyList_GET_ITEM(topics, i));
    }
    Py_XDECREF(topics);
    long long throttle;
    if (ok == 1)
        ok = int_attr(response, str_throttle_time_ms, INT32_MIN, INT32_MAX, &throttle);
    if (ok == 1 && reserve(&out, 5)) {
        put_be(&out, (uint64_t)throttle, 4);
        out.p[out.len++] = 0; /* no tagged fields */
        Py_ssize_t start = PyByteArray_GET_SIZE(buf);
        if (PyByteArray_Resize(buf, start + out.len) < 0)
            ok = -1;
        else
            memcpy(PyByteArray_AS_STRING(buf) + start, out.p, out.len);
    }
    else if (ok == 1)
        ok = -1; /* reserve failed */
    if (out.p != out.small)
        PyMem_Free(out.p);
    if (ok < 0)
        return NULL;
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"check_batch", check_batch, METH_VARARGS, check_batch_doc},
    {"read_request", read_request, METH_VARARGS, read_request_doc},
    {"write_response", write_response, METH_VARARGS, write_response_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_produce", "The hot parts of a Produce request, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__produce(void)
{
    PyObject *crc32c = PyImport_ImportModule("crc32c");
    if (crc32c == NULL)
        return NULL;
    crc32c_function = PyObject_GetAttrString(crc32c, "crc32c");
    Py_DECREF(crc32c);
    if (crc32c_function == NULL)
        return NULL;
    partition_kwnames = Py_BuildValue("(ss)", "index", "records");
    topic_kwnames = Py_BuildValue("(ss)", "name", "partition_data");
    request_kwnames = Py_BuildValue("(ssss)", "transactional_id", "acks", "timeout_ms", "topic_data");
    str_buf = PyUnicode_InternFromString("buf");
    str_pos = PyUnicode_InternFromString("pos");
    str_end = PyUnicode_InternFromString("end");
    if (!partition_kwnames || !topic_kwnames || !request_kwnames || !str_buf || !str_pos || !str_end)
        return NULL;
    PyObject **names[] = {&str_responses, &str_node_endpoints, &str_name, &str_partition_responses, &str_index,
                          &str_error_code, &str_base_offset, &str_log_append_time_ms, &str_log_start_offset,
                          &str_error_message, &str_record_errors, &str_current_leader, &str_leader_id,
                          &str_leader_epoch, &str_throttle_time_ms};
    const char *spelled[] = {"responses", "node_endpoints", "name", "partition_responses", "index",
                             "error_code", "base_offset", "log_append_time_ms", "log_start_offset",
                             "error_message", "record_errors", "current_leader", "leader_id",
                             "leader_epoch", "throttle_time_ms"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i] = PyUnicode_InternFromString(spelled[i])) == NULL)
            return NULL;
    return PyModule_Create(&module);
}
