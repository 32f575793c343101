/* The log cleaner's key map and record walks in C (plugins/storage/segment/cleaner.py).
 *
 * Compaction reads every record twice: once over the dirty section, to map each key to its
 * last offset, once over the segments it rewrites, to keep a record only where no later
 * offset of its key is mapped. In
 * Python each record cost about 8 us a pass (the varint walk, an MD5 object, a dict of
 * bytes); here it is a walk of the record's varints, one SipHash of its key and one probe
 * of a table, about 40 ns, without the GIL.
 *
 * The map is Kafka's SkimpyOffsetMap: 24 bytes an entry (a 16-byte digest of the key and
 * its offset) in one open-addressing table of `capacity` slots (the share of
 * log.cleaner.dedupe.buffer.size of one cleaner thread, allocated zeroed at once) holding
 * at most `limit` entries (Kafka's 90% load). Unlike Kafka's, the table in use starts at
 * its first 1024 slots and doubles in place as keys arrive, so a log of few keys touches
 * few pages of it (the system's zeroed pages are not copied until written) and probes
 * stay within the caches. The digest is SipHash-2-4 with a 128-bit output (one bit kept
 * for the doubling) under a key drawn for each map: two keys share an entry with a chance
 * of about n^2 / 2^128, and, unlike with MD5, a producer cannot choose keys that collide
 * without knowing the map's key.
 *
 * The walks accept what records.py's _recordscan walk accepts (the same bounds, each one
 * checked against the record's declared length and the section's length) and answer None
 * on anything else: cleaner.py then walks the batch in Python, which reads it or words
 * the error. tests/test_cleaner_walk.py holds the two walks to the same answers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* -- SipHash-2-4, 128-bit output (Aumasson and Bernstein) ---------------------------- */

static inline uint64_t
rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static inline uint64_t
load64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

#define SIPROUND                                                                                                       \
    do {                                                                                                               \
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);                                                     \
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;                                                                        \
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;                                                                        \
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);                                                     \
    } while (0)

static void
siphash128(const uint64_t key[2], const unsigned char *in, size_t len, uint64_t out[2])
{
    uint64_t v0 = key[0] ^ 0x736f6d6570736575ULL, v1 = key[1] ^ 0x646f72616e646f6dULL;
    uint64_t v2 = key[0] ^ 0x6c7967656e657261ULL, v3 = key[1] ^ 0x7465646279746573ULL;
    v1 ^= 0xee;
    const unsigned char *end = in + (len & ~(size_t)7);
    for (; in != end; in += 8) {
        uint64_t m = load64(in);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (size_t i = 0; i < (len & 7); i++)
        b |= (uint64_t)in[i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xee;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    out[0] = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    out[1] = v0 ^ v1 ^ v2 ^ v3;
}

/* -- the record walk ------------------------------------------------------------------ */

/* An unsigned LEB128 varint of at most max_bytes at *pos, below end, zigzag-decoded; 0
 * past end, past max_bytes and past 64 bits (as _recordscan.c reads them). */
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
            return 0;
        value |= (uint64_t)(b & 0x7f) << (7 * i);
        if (b < 0x80) {
            *pos = p;
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return 1;
        }
    }
    return 0;
}

typedef struct {
    Py_ssize_t start, stop; /* the record's bytes, its length varint included */
    int64_t offset_delta;
    Py_ssize_t key, key_size; /* key < 0: a null key */
    int null_value;
} record;

/* The record at *pos, below end: 1 and *pos past it, or 0 when it is not well formed. */
static int
read_record(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, record *r)
{
    int64_t length, timestamp, n;
    Py_ssize_t p = *pos;
    r->start = p;
    if (!read_varint(buf, &p, end, 5, &length) || length < 1 || length > end - p)
        return 0;
    Py_ssize_t stop = p + (Py_ssize_t)length;
    p += 1; /* the attributes byte, unused in v2 */
    if (!read_varint(buf, &p, stop, 10, &timestamp) || !read_varint(buf, &p, stop, 5, &r->offset_delta))
        return 0;
    if (!read_varint(buf, &p, stop, 5, &n) || n > stop - p)
        return 0;
    r->key = n < 0 ? -1 : p;
    r->key_size = n < 0 ? 0 : (Py_ssize_t)n;
    p += r->key_size;
    if (!read_varint(buf, &p, stop, 5, &n) || n > stop - p)
        return 0;
    r->null_value = n < 0;
    if (n > 0)
        p += (Py_ssize_t)n;
    if (!read_varint(buf, &p, stop, 5, &n) || n < 0 || n > stop - p)
        return 0;
    for (int64_t h = 0; h < n; h++) {
        int64_t size;
        if (!read_varint(buf, &p, stop, 5, &size) || size < 0 || size > stop - p) /* a null header key too */
            return 0;
        p += (Py_ssize_t)size;
        if (!read_varint(buf, &p, stop, 5, &size) || size > stop - p)
            return 0;
        if (size > 0)
            p += (Py_ssize_t)size;
    }
    if (p != stop)
        return 0;
    r->stop = stop;
    *pos = stop;
    return 1;
}

/* -- the map -------------------------------------------------------------------------- */

typedef struct {
    uint64_t h0, h1;
    uint64_t stored; /* offset + 1; 0: an empty slot */
} entry;

typedef struct {
    PyObject_HEAD
    entry *slots;         /* `capacity` slots, zeroed; the table is the first `allocated` */
    Py_ssize_t allocated; /* slots in the table now */
    Py_ssize_t capacity;  /* the most slots it may have */
    Py_ssize_t limit;     /* the most entries */
    Py_ssize_t size;      /* entries */
    uint64_t key[2];      /* SipHash's key */
    int busy;             /* a walk runs without the GIL */
} OffsetMap;

#define FIRST_SLOTS 1024
#define MOVING (1ULL << 63) /* in h1, while the table grows: an entry not yet moved */

/* The digest of a key: SipHash-2-4-128 less one bit (a table's mark while it grows). */
static inline void
key_digest(const OffsetMap *m, const unsigned char *key, Py_ssize_t size, uint64_t h[2])
{
    siphash128(m->key, key, (size_t)size, h);
    h[1] &= ~MOVING;
}

static inline size_t
home(const OffsetMap *m, uint64_t h0)
{
#ifdef __SIZEOF_INT128__
    return (size_t)(((unsigned __int128)h0 * (uint64_t)m->allocated) >> 64); /* h0 scaled to the table */
#else
    return (size_t)(h0 % (uint64_t)m->allocated);
#endif
}

/* The entry of digest h, or the empty slot where it would go. The table always has an
 * empty slot (size < allocated), so the probe ends. */
static entry *
find(const OffsetMap *m, const uint64_t h[2])
{
    size_t i = home(m, h[0]);
    for (;;) {
        entry *e = &m->slots[i];
        if (e->stored == 0 || (e->h0 == h[0] && e->h1 == h[1]))
            return e;
        if (++i == (size_t)m->allocated)
            i = 0;
    }
}

/* Double the table (up to capacity) in place, within the slots it already has: every
 * entry is marked MOVING, then each marked one is taken out and put at its place in the
 * larger table, where a marked entry it finds there is swapped out and placed in turn. A
 * placed entry's probe passes only placed entries, which never move again, so it stays
 * found; each step places one entry. */
static void
grow(OffsetMap *m)
{
    Py_ssize_t old = m->allocated;
    m->allocated = m->allocated * 2 < m->capacity ? m->allocated * 2 : m->capacity;
    for (Py_ssize_t i = 0; i < old; i++)
        if (m->slots[i].stored)
            m->slots[i].h1 |= MOVING;
    for (Py_ssize_t i = 0; i < old; i++) {
        if (!m->slots[i].stored || !(m->slots[i].h1 & MOVING))
            continue;
        entry moving = m->slots[i];
        memset(&m->slots[i], 0, sizeof(entry));
        for (;;) {
            moving.h1 &= ~MOVING;
            size_t j = home(m, moving.h0);
            while (m->slots[j].stored && !(m->slots[j].h1 & MOVING))
                if (++j == (size_t)m->allocated)
                    j = 0;
            entry found = m->slots[j];
            m->slots[j] = moving;
            if (!found.stored)
                break;
            moving = found; /* a marked entry, to place in turn */
        }
    }
}

/* Map digest h to offset (>= 0): 1, or 0 when h is new and the map is full. */
static int
put(OffsetMap *m, const uint64_t h[2], int64_t offset)
{
    entry *e = find(m, h);
    if (e->stored == 0) {
        if (m->size >= m->limit)
            return 0;
        if ((m->size + 1) * 4 > m->allocated * 3 && m->allocated < m->capacity) {
            grow(m);
            e = find(m, h);
        }
        e->h0 = h[0];
        e->h1 = h[1];
        m->size++;
    }
    e->stored = (uint64_t)offset + 1;
    return 1;
}

/* The offset mapped to digest h, or -1. */
static int64_t
get(const OffsetMap *m, const uint64_t h[2])
{
    const entry *e = find(m, h);
    return e->stored ? (int64_t)(e->stored - 1) : -1;
}

/* Map the keyed records of `count` records at or past offset `start`: 1 with *full_at -1
 * (all mapped) or the offset of the first record whose key did not fit; 0 when the
 * records are not ones this walk accepts. No GIL. */
static int
add_records(OffsetMap *m, const unsigned char *buf, Py_ssize_t end, Py_ssize_t count, int64_t base, int64_t start,
            int64_t *full_at)
{
    Py_ssize_t pos = 0;
    record r;
    uint64_t h[2];
    int64_t offset;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (!read_record(buf, &pos, end, &r) || __builtin_add_overflow(base, r.offset_delta, &offset))
            return 0;
        if (r.key < 0 || offset < start)
            continue;
        key_digest(m, buf + r.key, r.key_size, h);
        if (!put(m, h, offset)) {
            *full_at = offset;
            return 1;
        }
    }
    if (pos != end)
        return 0;
    *full_at = -1;
    return 1;
}

/* Copy to out the records that stay (cleaner.py's rule: past `reached` every record; below
 * it a record whose key has no later offset in the map and that is not a tombstone to
 * drop), counting them in *kept and their bytes in *written: 1, or 0 when the records
 * are not ones this walk accepts. out has room for the whole section. No GIL. */
static int
retain_records(const OffsetMap *m, const unsigned char *buf, Py_ssize_t end, Py_ssize_t count, int64_t base,
               int64_t reached, int drop_tombstones, unsigned char *out, Py_ssize_t *kept, Py_ssize_t *written)
{
    Py_ssize_t pos = 0, n = 0, w = 0;
    record r;
    uint64_t h[2];
    int64_t offset;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (!read_record(buf, &pos, end, &r) || __builtin_add_overflow(base, r.offset_delta, &offset))
            return 0;
        if (offset < reached) {
            if (r.key >= 0) {
                key_digest(m, buf + r.key, r.key_size, h);
                if (get(m, h) > offset)
                    continue; /* a later record of the key is in the map */
            }
            if (r.null_value && drop_tombstones)
                continue;
        }
        memcpy(out + w, buf + r.start, (size_t)(r.stop - r.start));
        w += r.stop - r.start;
        n++;
    }
    if (pos != end)
        return 0;
    *kept = n;
    *written = w;
    return 1;
}

/* -- the Python type -------------------------------------------------------------------- */

static int
take(OffsetMap *m)
{
    if (m->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the offset map is in use by another thread");
        return 0;
    }
    m->busy = 1;
    return 1;
}

static PyObject *
OffsetMap_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"capacity", "limit", "seed", NULL};
    Py_ssize_t capacity, limit;
    Py_buffer seed;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nny*", names, &capacity, &limit, &seed))
        return NULL;
    if (seed.len != 16 || capacity < 2 || capacity > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(entry) || limit < 1) {
        PyBuffer_Release(&seed);
        PyErr_SetString(PyExc_ValueError, "OffsetMap needs a capacity of 2 slots or more, a limit of 1 or more and "
                                          "a 16-byte seed");
        return NULL;
    }
    OffsetMap *m = (OffsetMap *)type->tp_alloc(type, 0);
    if (m == NULL) {
        PyBuffer_Release(&seed);
        return NULL;
    }
    m->key[0] = load64(seed.buf);
    m->key[1] = load64((const unsigned char *)seed.buf + 8);
    PyBuffer_Release(&seed);
    m->capacity = capacity;
    m->limit = limit < capacity ? limit : capacity - 1; /* an empty slot always */
    m->allocated = capacity < FIRST_SLOTS ? capacity : FIRST_SLOTS;
    /* all of it at once, zeroed: the system's zeroed pages, touched as the table grows */
    m->slots = PyMem_RawCalloc((size_t)capacity, sizeof(entry));
    if (m->slots == NULL) {
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
    return (PyObject *)m;
}

static void
OffsetMap_dealloc(OffsetMap *m)
{
    PyMem_RawFree(m->slots);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *
OffsetMap_digest(OffsetMap *m, PyObject *arg)
{
    Py_buffer key;
    uint64_t h[2];
    unsigned char out[16];
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0)
        return NULL;
    siphash128(m->key, key.buf, (size_t)key.len, h);
    PyBuffer_Release(&key);
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(h[0] >> (8 * i));
        out[8 + i] = (unsigned char)(h[1] >> (8 * i));
    }
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

static PyObject *
OffsetMap_put(OffsetMap *m, PyObject *args)
{
    Py_buffer key;
    long long offset;
    uint64_t h[2];
    if (!PyArg_ParseTuple(args, "y*L", &key, &offset))
        return NULL;
    if (offset < 0 || !take(m)) {
        PyBuffer_Release(&key);
        if (offset < 0)
            PyErr_SetString(PyExc_ValueError, "offsets are 0 or more");
        return NULL;
    }
    key_digest(m, key.buf, key.len, h);
    PyBuffer_Release(&key);
    int done = put(m, h, offset);
    m->busy = 0;
    return PyBool_FromLong(done);
}

static PyObject *
OffsetMap_get(OffsetMap *m, PyObject *arg)
{
    Py_buffer key;
    uint64_t h[2];
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0)
        return NULL;
    if (!take(m)) {
        PyBuffer_Release(&key);
        return NULL;
    }
    key_digest(m, key.buf, key.len, h);
    PyBuffer_Release(&key);
    int64_t offset = get(m, h);
    m->busy = 0;
    return PyLong_FromLongLong(offset);
}

static PyObject *
OffsetMap_add(OffsetMap *m, PyObject *args)
{
    Py_buffer payload;
    Py_ssize_t count;
    long long base, start;
    int64_t full_at = -1;
    int ok;
    if (!PyArg_ParseTuple(args, "y*nLL", &payload, &count, &base, &start))
        return NULL;
    if (count < 0 || start < 0 || !take(m)) {
        PyBuffer_Release(&payload);
        if (count < 0 || start < 0)
            PyErr_SetString(PyExc_ValueError, "count and start are 0 or more");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    ok = add_records(m, payload.buf, payload.len, count, base, start, &full_at);
    Py_END_ALLOW_THREADS
    m->busy = 0;
    PyBuffer_Release(&payload);
    if (!ok)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(full_at);
}

static PyObject *
OffsetMap_retain(OffsetMap *m, PyObject *args)
{
    Py_buffer payload;
    Py_ssize_t count, kept = 0, written = 0;
    long long base, reached;
    int drop_tombstones, ok;
    if (!PyArg_ParseTuple(args, "y*nLLp", &payload, &count, &base, &reached, &drop_tombstones))
        return NULL;
    if (count < 0) {
        PyBuffer_Release(&payload);
        PyErr_SetString(PyExc_ValueError, "count is 0 or more");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, payload.len); /* the kept records fit in the section */
    if (out == NULL || !take(m)) {
        Py_XDECREF(out);
        PyBuffer_Release(&payload);
        return NULL;
    }
    unsigned char *to = (unsigned char *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    ok = retain_records(m, payload.buf, payload.len, count, base, reached, drop_tombstones, to, &kept, &written);
    Py_END_ALLOW_THREADS
    m->busy = 0;
    PyBuffer_Release(&payload);
    if (!ok || kept == count) {
        Py_DECREF(out);
        if (!ok)
            Py_RETURN_NONE;
        return Py_BuildValue("(nO)", kept, Py_None);
    }
    if (_PyBytes_Resize(&out, written) < 0)
        return NULL;
    return Py_BuildValue("(nN)", kept, out);
}

static PyObject *
OffsetMap_get_size(OffsetMap *m, void *closure)
{
    return PyLong_FromSsize_t(m->size);
}

static PyObject *
OffsetMap_get_memory(OffsetMap *m, void *closure)
{
    return PyLong_FromSsize_t(m->allocated * (Py_ssize_t)sizeof(entry));
}

static PyMethodDef OffsetMap_methods[] = {
    {"add", (PyCFunction)OffsetMap_add, METH_VARARGS,
     "add(payload, count, base_offset, start) -> int | None\n\n"
     "Walk `count` records of a decompressed records section (without the GIL) and map\n"
     "the key of each keyed record at or past offset `start` to its offset. Returns -1\n"
     "when every key fitted, the offset of the first record whose key did not (the map\n"
     "is full: the walk stops there), or None when the section is not one this walk\n"
     "accepts (the Python walk then reads it or words the error)."},
    {"retain", (PyCFunction)OffsetMap_retain, METH_VARARGS,
     "retain(payload, count, base_offset, reached, drop_tombstones) -> (kept, bytes | None) | None\n\n"
     "Walk `count` records (without the GIL) and keep every record at or past offset\n"
     "`reached`, and below it a record whose key has no later offset in the map, unless\n"
     "it is a tombstone and `drop_tombstones`. Returns the number kept and their bytes\n"
     "(None when all are kept), or None when the section is not one this walk accepts."},
    {"put", (PyCFunction)OffsetMap_put, METH_VARARGS,
     "put(key, offset) -> bool: map key to offset; False when the key is new and the map is full."},
    {"get", (PyCFunction)OffsetMap_get, METH_O, "get(key) -> int: the offset mapped to key, or -1."},
    {"digest", (PyCFunction)OffsetMap_digest, METH_O,
     "digest(data) -> bytes: SipHash-2-4-128 of data under the map's seed (a key's digest is that less one bit)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef OffsetMap_getset[] = {
    {"size", (getter)OffsetMap_get_size, NULL, "entries in the map", NULL},
    {"memory", (getter)OffsetMap_get_memory, NULL, "bytes its table takes now", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "brokkr.plugins.storage.segment._cleaner.OffsetMap",
    .tp_basicsize = sizeof(OffsetMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OffsetMap(capacity, limit, seed): key digest -> last offset, at most `capacity` slots of 24 bytes\n"
              "and `limit` entries (Kafka's SkimpyOffsetMap), keyed by SipHash-2-4-128 under the 16-byte seed.",
    .tp_new = OffsetMap_new,
    .tp_dealloc = (destructor)OffsetMap_dealloc,
    .tp_methods = OffsetMap_methods,
    .tp_getset = OffsetMap_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cleaner", "The log cleaner's key map and record walks, in C.", -1, NULL,
};

PyMODINIT_FUNC
PyInit__cleaner(void)
{
    if (PyType_Ready(&OffsetMapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&OffsetMapType) < 0) {
        Py_DECREF(&OffsetMapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
