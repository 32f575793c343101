/* The flusher's small durable writes in C: files.write_synced, files.fsync_path and
 * files.replace_files (write_atomically's list), each one call that lets go of the GIL
 * once, however many files it writes.
 *
 * Written in Python, every system call of these (open, write, fsync, close, rename, and
 * the directory's open, fsync and close) lets go of the GIL and takes it back. While the
 * event loop's thread is busy, taking it back means waiting for that thread to let go, and
 * each hand-over costs it two context switches. A topic of 1,000 partitions queues 1,000
 * leader-epoch checkpoints at its first appends: in Python they slowed every request of
 * the event loop while they lasted. Here the flusher writes them all in one call (see
 * flusher.py), with one hand-over each way.
 *
 * The Python versions in files.py stay, for installs without a compiler;
 * tests/test_segment_files.py holds the two to the same files and the same errors.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* Where a system call failed: its errno and the file (or files) it names, as the caller
 * named them (str, bytes or a path). */
typedef struct {
    int error;
    PyObject *filename;  /* borrowed */
    PyObject *filename2; /* borrowed, or NULL */
} failure;

/* A file name for a system call (`path`, bytes) and for its errors (`name`, as given). */
typedef struct {
    PyObject *path;
    PyObject *name;
} file_name;

static void
fail(failure *f, PyObject *filename, PyObject *filename2)
{
    f->error = errno;
    f->filename = filename;
    f->filename2 = filename2;
}

/* The OSError `f` describes, as OSError(errno, strerror, filename[, None, filename2])
 * makes it (the subclass for its errno), or NULL with an exception set. */
static PyObject *
failure_error(const failure *f)
{
    if (f->filename2 != NULL)
        return PyObject_CallFunction(PyExc_OSError, "isOOO", f->error, strerror(f->error), f->filename, Py_None,
                                     f->filename2);
    return PyObject_CallFunction(PyExc_OSError, "isO", f->error, strerror(f->error), f->filename);
}

static PyObject *
raise_failure(const failure *f)
{
    PyObject *error = failure_error(f);
    if (error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
    }
    return NULL;
}

/* Write `data` as the whole of `file` and fsync it; 0, or -1 with `f` set. No GIL. */
static int
write_synced_nogil(file_name file, const char *data, Py_ssize_t size, failure *f)
{
    int fd = open(PyBytes_AS_STRING(file.path), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        fail(f, file.name, NULL);
        return -1;
    }
    Py_ssize_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, (size_t)(size - done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            goto failed;
        }
        done += n;
    }
    if (fsync(fd) < 0)
        goto failed;
    if (close(fd) < 0) {
        fail(f, file.name, NULL);
        return -1;
    }
    return 0;
failed:
    fail(f, file.name, NULL);
    close(fd);
    return -1;
}

/* fsync `file` by name: 1, 0 when it does not exist, or -1 with `f` set. No GIL. */
static int
fsync_path_nogil(file_name file, failure *f)
{
    int fd = open(PyBytes_AS_STRING(file.path), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        fail(f, file.name, NULL);
        return -1;
    }
    if (fsync(fd) < 0) {
        fail(f, file.name, NULL);
        close(fd);
        return -1;
    }
    if (close(fd) < 0) {
        fail(f, file.name, NULL);
        return -1;
    }
    return 1;
}

static PyObject *
write_synced(PyObject *self, PyObject *args)
{
    file_name file = {NULL, NULL};
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "Oy*:write_synced", &file.name, &data))
        return NULL;
    if (!PyUnicode_FSConverter(file.name, &file.path)) {
        PyBuffer_Release(&data);
        return NULL;
    }
    failure f;
    int result;
    Py_BEGIN_ALLOW_THREADS
    result = write_synced_nogil(file, data.buf, data.len, &f);
    Py_END_ALLOW_THREADS
    PyObject *out = result < 0 ? raise_failure(&f) : Py_NewRef(Py_None);
    PyBuffer_Release(&data);
    Py_DECREF(file.path);
    return out;
}

static PyObject *
fsync_path(PyObject *self, PyObject *name)
{
    file_name file = {NULL, name};
    if (!PyUnicode_FSConverter(name, &file.path))
        return NULL;
    failure f;
    int result;
    Py_BEGIN_ALLOW_THREADS
    result = fsync_path_nogil(file, &f);
    Py_END_ALLOW_THREADS
    PyObject *out = result < 0 ? raise_failure(&f) : PyBool_FromLong(result);
    Py_DECREF(file.path);
    return out;
}

/* One file of write_atomically's list: its names as bytes, its data, how it went. */
typedef struct {
    file_name tmp, path, directory; /* their names are borrowed from the caller's tuple */
    Py_buffer data;
    int failed;
    failure why;
} replacement;

static void
release_replacements(replacement *r, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(r[i].tmp.path);
        Py_XDECREF(r[i].path.path);
        Py_XDECREF(r[i].directory.path);
        if (r[i].data.obj != NULL)
            PyBuffer_Release(&r[i].data);
    }
    PyMem_Free(r);
}

static PyObject *
write_atomically(PyObject *self, PyObject *items)
{
    PyObject *seq = PySequence_Fast(items, "write_atomically() takes a list of (tmp, path, directory, data)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    replacement *r = PyMem_Calloc(n > 0 ? n : 1, sizeof(replacement));
    if (r == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_SetString(PyExc_TypeError, "write_atomically() takes a list of (tmp, path, directory, data)");
            goto error;
        }
        r[i].tmp.name = PyTuple_GET_ITEM(item, 0);
        r[i].path.name = PyTuple_GET_ITEM(item, 1);
        r[i].directory.name = PyTuple_GET_ITEM(item, 2);
        if (!PyUnicode_FSConverter(r[i].tmp.name, &r[i].tmp.path)
            || !PyUnicode_FSConverter(r[i].path.name, &r[i].path.path)
            || !PyUnicode_FSConverter(r[i].directory.name, &r[i].directory.path)
            || PyObject_GetBuffer(PyTuple_GET_ITEM(item, 3), &r[i].data, PyBUF_SIMPLE) < 0)
            goto error;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        replacement *one = &r[i];
        int result = write_synced_nogil(one->tmp, one->data.buf, one->data.len, &one->why);
        if (result == 0 && rename(PyBytes_AS_STRING(one->tmp.path), PyBytes_AS_STRING(one->path.path)) < 0) {
            fail(&one->why, one->tmp.name, one->path.name);
            result = -1;
        }
        if (result == 0)
            result = fsync_path_nogil(one->directory, &one->why);
        one->failed = result < 0;
    }
    Py_END_ALLOW_THREADS
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *outcome = r[i].failed ? failure_error(&r[i].why) : Py_NewRef(Py_None);
        if (outcome == NULL) {
            Py_DECREF(out);
            goto error;
        }
        PyList_SET_ITEM(out, i, outcome);
    }
    release_replacements(r, n);
    Py_DECREF(seq);
    return out;
error:
    release_replacements(r, n);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"write_synced", write_synced, METH_VARARGS,
     "write_synced(path, data): write data as the whole file and fsync it."},
    {"fsync_path", fsync_path, METH_O,
     "fsync_path(path) -> bool: fsync a file or directory by name; False when it does not exist."},
    {"write_atomically", write_atomically, METH_O,
     "write_atomically(items) -> list: for each (tmp, path, directory, data), write_synced(tmp, data), rename tmp "
     "to path, fsync directory; None for each file written, else the OSError that stopped it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_files", "The flusher's small durable writes, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__files(void)
{
    return PyModule_Create(&module);
}
