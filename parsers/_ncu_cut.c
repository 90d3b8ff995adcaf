/* parsers._ncu_cut: cuts the wanted columns out of the rows of an ncu raw page (see
 * parsers/ncu_csv.py, _cut_rows), so that pandas tokenizes ~15 columns instead of ~273.
 *
 * cut(data, keep) -> bytes | None
 *   data: whole lines, the last one ended by '\n' (or empty). keep: one byte per column of the
 *   header, nonzero for a wanted column. Gives, for every line, the wanted fields as CSV
 *   ("a","b"\n), or None where any line is not exactly len(keep) fields, each quoted, with no
 *   quote or newline inside a field ('\r' before the '\n' is allowed). ncu quotes every field
 *   and doubles no quote in real pages; on None the caller reads the block another way.
 *
 * The contract with the Python reader: where this gives bytes, they hold the very field text
 * pandas would have read from those lines. Plain C and the CPython C API only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* Cuts one line starting at *p (after the caller checked *p == '"'); returns 0 where the line
 * is not plain. Every scan stops at '\n' at the latest, and the buffer's last byte is one. */
static int cut_line(const char **pp, char **oo, const char *keep, Py_ssize_t ncols)
{
    const char *p = *pp + 1;
    char *o = *oo;
    int first = 1;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        const char *q = p;
        while (*q != '"' && *q != '\n')
            q++;
        if (*q != '"')
            return 0;
        if (keep[i]) {
            if (!first)
                *o++ = ',';
            *o++ = '"';
            memcpy(o, p, (size_t)(q - p));
            o += q - p;
            *o++ = '"';
            first = 0;
        }
        if (i + 1 < ncols) {
            if (q[1] != ',' || q[2] != '"') /* q[1] != '\n' here, so q[2] is in the buffer */
                return 0;
            p = q + 3;
        } else {
            p = q + 1;
            if (*p == '\r')
                p++;
            if (*p != '\n')
                return 0;
            p++;
        }
    }
    *o++ = '\n';
    *pp = p;
    *oo = o;
    return 1;
}

static PyObject *cut(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, keep;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &keep))
        return NULL;
    PyObject *result = NULL;
    const char *p = data.buf, *end = p + data.len;
    if (keep.len == 0 || (data.len && end[-1] != '\n')) {
        PyErr_SetString(PyExc_ValueError, "cut: no columns, or data not ended by a newline");
        goto done;
    }
    /* a line's cut is never longer than the line: the same fields less some, one separator less */
    result = PyBytes_FromStringAndSize(NULL, data.len);
    if (!result)
        goto done;
    char *o = PyBytes_AS_STRING(result);
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    while (p < end && (ok = *p == '"' && cut_line(&p, &o, keep.buf, keep.len)))
        ;
    Py_END_ALLOW_THREADS
    if (!ok) {
        Py_CLEAR(result);
        result = Py_NewRef(Py_None);
    } else if (_PyBytes_Resize(&result, o - PyBytes_AS_STRING(result)) < 0) {
        result = NULL;
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&keep);
    return result;
}

static PyMethodDef methods[] = {
    {"cut", cut, METH_VARARGS,
     "cut(data, keep) -> bytes | None: the kept columns of whole, plainly quoted CSV lines."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "parsers._ncu_cut", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ncu_cut(void)
{
    return PyModule_Create(&module);
}
