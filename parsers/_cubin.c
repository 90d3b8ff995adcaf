/* parsers._cubin: the compiled twin of parsers/cubin.py's kernels() (see that module's
 * docstring for where each field comes from).
 *
 * The contract with the Python reader, which stays the reference: for any bytes, a call here
 * either gives what parsers.cubin's pure-Python path gives, raises the very ParseError it
 * would raise (the same checks in the same order, the same message), or returns None, and
 * then the caller runs the Python path. None covers what cubins never hold and would cost
 * code to mirror exactly: string tables with non-ASCII bytes (Python decodes them with
 * replacement) and SHN_XINDEX symbol indices. Every offset is checked against the buffer.
 *
 * kernels(data, file) -> None | (arch, list of (name, registers, shared_bytes, local_bytes,
 *                        stack_bytes, param_bytes, max_threads_per_block, block, extra))
 * The records become KernelRecords in parsers/cubin.py; rootcause.inspect writes the rows.
 * Plain C and the CPython C API only (CI has gcc and the Python headers, nothing else).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#define EM_CUDA 190
#define SHT_SYMTAB 2
#define SHT_NOBITS 8
#define SHT_DYNSYM 11
#define SHT_SYMTAB_SHNDX 18
#define SHN_LORESERVE 0xFF00u
#define SHN_XINDEX 0xFFFFu
#define STT_FUNC 2
#define ET_EXEC 2
#define STO_CUDA_ENTRY 0x10
#define EIFMT_NVAL 1
#define EIFMT_BVAL 2
#define EIFMT_HVAL 3
#define EIFMT_SVAL 4
#define EIATTR_MAX_THREADS 0x05
#define EIATTR_PARAM_CBANK 0x0A
#define EIATTR_REQNTID 0x10
#define EIATTR_FRAME_SIZE 0x11
#define EIATTR_MIN_STACK_SIZE 0x12
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIATTR_MAXREG_COUNT 0x1B
#define EIATTR_MAX_STACK_SIZE 0x23
#define EIATTR_REGCOUNT 0x2F
#define EIATTR_NUM_BARRIERS 0x4C
#define EICOMPAT_ACCELERATOR 0x09
#define STACK_UNKNOWN 0xFFFFFFFFu
#define RESERVED_SMEM_DEFAULT 1024

static PyObject *ParseError; /* parsers.base.ParseError */

typedef struct {
    const char *name; /* into the section name table (NUL-terminated there) */
    size_t name_len;
    uint32_t type, link, info;
    uint64_t flags, offset, size, entsize;
} Section;

typedef struct {
    const char *name;
    size_t name_len;
    uint64_t value;
    uint32_t shndx;
    uint8_t info, other;
} Symbol;

/* A kernel's sections are named prefix + kernel name: one table entry per name holds them all. */
enum { S_TEXT, S_INFO, S_SHARED, S_CONST0, S_LOCAL, S_KINDS };
static const char *const PREFIXES[S_KINDS] = {".text.", ".nv.info.", ".nv.shared.", ".nv.constant0.", ".nv.local."};

typedef struct {
    const char *name; /* NULL: a free slot */
    size_t name_len;
    int32_t sec[S_KINDS]; /* section index, or -1 */
} Named;

/* The four keyed attributes of the global .nv.info, per symbol index. */
enum { K_REGCOUNT, K_FRAME, K_MIN_STACK, K_MAX_STACK, K_COUNT };

typedef struct {
    const uint8_t *data;
    uint64_t n;
    PyObject *file; /* str: the file named in errors */
    uint16_t e_type;
    uint32_t e_flags;
    uint8_t abi;
    Section *secs;
    size_t nsecs;
    Named *table; /* open-addressed: kernel name -> its sections (the last of a name wins) */
    size_t table_mask;
    Symbol *syms;
    size_t nsyms;
    uint32_t (*keyed)[K_COUNT];
    uint8_t (*has_keyed)[K_COUNT];
    char arch[16];
    uint64_t reserved;
} Cubin;

/* One kernel's facts, as parsers.cubin._row computes them. */
typedef struct {
    const Symbol *sym;
    int has_regs, has_local, has_stack, stack_unknown, has_stack_max, has_param, has_shared_sec;
    int has_const0, has_barriers, has_maxreg, has_reqntid, has_max_threads;
    uint64_t regs, local, stack, stack_max, param, shared, shared_sec, reserved_used;
    uint64_t const0, local_sec, barriers, maxreg, params;
    uint32_t reqntid[3], max_threads[3];
} Kernel;

enum { OK = 0, FAIL = -1, BAIL = 1 }; /* FAIL: a Python error is set; BAIL: use the Python path */

/* ---- errors: ParseError(file, where, what), each built like the Python f-strings ---------- */

static PyObject *vformat(const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int len = vsnprintf(NULL, 0, fmt, ap);
    if (len < 0) {
        va_end(again);
        PyErr_SetString(PyExc_SystemError, "bad message format");
        return NULL;
    }
    char *buf = PyMem_Malloc((size_t)len + 1);
    if (!buf) {
        va_end(again);
        return PyErr_NoMemory();
    }
    vsnprintf(buf, (size_t)len + 1, fmt, again);
    va_end(again);
    PyObject *out = PyUnicode_DecodeUTF8(buf, len, "replace");
    PyMem_Free(buf);
    return out;
}

static PyObject *format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *out = vformat(fmt, ap);
    va_end(ap);
    return out;
}

/* Raise ParseError(c->file, where, what); where is a ready str (stolen), what a format. */
static int fail(Cubin *c, PyObject *where, const char *what_fmt, ...)
{
    if (!where)
        return FAIL;
    va_list ap;
    va_start(ap, what_fmt);
    PyObject *what = vformat(what_fmt, ap);
    va_end(ap);
    if (what) {
        PyObject *err = PyObject_CallFunctionObjArgs(ParseError, c->file, where, what, NULL);
        if (err) {
            PyErr_SetObject(ParseError, err);
            Py_DECREF(err);
        }
        Py_DECREF(what);
    }
    Py_DECREF(where);
    return FAIL;
}

/* ---- little-endian reads (bounds are checked by the callers) ------------------------------ */

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

/* ---- the ELF header and section table (parsers/elf.py read_header, Elf._read_sections) ----- */

static int read_header(Cubin *c)
{
    const uint8_t *d = c->data;
    uint64_t n = c->n;
    if (n >= 4 && memcmp(d, "\x7f" "ELF", 4) != 0)
        return fail(c, format("offset 0"), "not an ELF file (magic %02x%02x%02x%02x)", d[0], d[1], d[2], d[3]);
    if (n < 64)
        return fail(c, format("offset 0"), "truncated ELF header (%llu bytes, 64 needed)", (unsigned long long)n);
    if (d[4] != 2)
        return fail(c, format("e_ident"), "ELF class %u: only 64-bit (class 2) ELF is read", d[4]);
    if (d[5] != 1 && d[5] != 2)
        return fail(c, format("e_ident"), "unknown ELF data encoding %u", d[5]);
    if (d[5] != 1)
        return fail(c, format("e_ident"), "not a little-endian ELF (CUDA ELF is little-endian)");
    uint16_t machine = u16(d + 18);
    if (machine != EM_CUDA)
        return fail(c, format("e_machine"), "not a CUDA ELF: e_machine %u, expected %d (EM_CUDA)", machine, EM_CUDA);
    c->abi = d[8];
    c->e_type = u16(d + 16);
    c->e_flags = u32(d + 48);
    return OK;
}

static int is_ascii(const uint8_t *p, uint64_t len)
{
    uint64_t i = 0, high = 0;
    for (; i + 8 <= len; i += 8) { /* eight bytes a step: string tables are most of a cubin's tables */
        uint64_t word;
        memcpy(&word, p + i, 8);
        high |= word;
    }
    for (; i < len; i++)
        high |= p[i];
    return (high & 0x8080808080808080ull) == 0;
}

/* Where entry i of a name table is, for errors: "section i", or "section s (name) symbol i"
 * when symtab (section s) is given. Built only when an error is raised. */
static PyObject *name_where(const Section *symtab, size_t s, size_t i)
{
    if (!symtab)
        return format("section %zu", i);
    return format("section %zu (%.*s) symbol %zu", s, (int)symtab->name_len, symtab->name, i);
}

/* parsers.elf._names for one entry: the name at off, or the error _string raises. The table
 * is ASCII (checked by the caller), so the decoded name is the bytes. */
static int name_at(Cubin *c, const uint8_t *strings, uint64_t len, uint64_t off, const char **name,
                   size_t *name_len, const char *table, const Section *symtab, size_t s, size_t i)
{
    if (off == 0 && len == 0) {
        *name = "";
        *name_len = 0;
        return OK;
    }
    if (off >= len)
        return fail(c, name_where(symtab, s, i), "name offset 0x%llx is outside the %s (%llu bytes)",
                    (unsigned long long)off, table, (unsigned long long)len);
    const uint8_t *end = memchr(strings + off, 0, len - off);
    if (!end)
        return fail(c, name_where(symtab, s, i), "name at 0x%llx of the %s has no terminating NUL",
                    (unsigned long long)off, table);
    *name = (const char *)strings + off;
    *name_len = (size_t)(end - (strings + off));
    return OK;
}

static uint64_t hash_name(const char *s, size_t len)
{
    uint64_t h = len * 0x9E3779B97F4A7C15ull, word;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) { /* eight bytes a step: kernel names are long */
        memcpy(&word, s + i, 8);
        h = (h ^ word) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    for (; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
    return h ^ (h >> 29);
}

/* The slot of name: its entry, or the free slot where it would go. */
static Named *slot(Cubin *c, const char *name, size_t len)
{
    size_t at = (size_t)hash_name(name, len) & c->table_mask;
    while (c->table[at].name && !(c->table[at].name_len == len && memcmp(c->table[at].name, name, len) == 0))
        at = (at + 1) & c->table_mask;
    return &c->table[at];
}

/* Which of PREFIXES a section name starts with, or -1; told by a character or two first
 * (a cubin has four or five sections a kernel). */
static int prefix_kind(const char *name, size_t len)
{
    int kind = -1;
    if (len > 1 && name[0] == '.' && name[1] == 't')
        kind = S_TEXT;
    else if (len > 4 && memcmp(name, ".nv.", 4) == 0)
        kind = name[4] == 'i' ? S_INFO : name[4] == 's' ? S_SHARED : name[4] == 'c' ? S_CONST0
             : name[4] == 'l' ? S_LOCAL : -1;
    if (kind < 0)
        return -1;
    size_t plen = strlen(PREFIXES[kind]);
    return len >= plen && memcmp(name, PREFIXES[kind], plen) == 0 ? kind : -1;
}

static int build_table(Cubin *c)
{
    size_t size = 16; /* a kernel has 3 to 5 sections: the table stays under half full */
    while (size <= c->nsecs) /* more slots than sections: a free one always ends a probe */
        size <<= 1;
    c->table = PyMem_Calloc(size, sizeof(Named));
    if (!c->table)
        return PyErr_NoMemory(), FAIL;
    c->table_mask = size - 1;
    for (size_t i = 0; i < c->nsecs; i++) {
        const Section *s = &c->secs[i];
        int kind = prefix_kind(s->name, s->name_len);
        if (kind < 0)
            continue;
        size_t plen = strlen(PREFIXES[kind]);
        Named *e = slot(c, s->name + plen, s->name_len - plen);
        if (!e->name) {
            e->name = s->name + plen;
            e->name_len = s->name_len - plen;
            for (int k = 0; k < S_KINDS; k++)
                e->sec[k] = -1;
        }
        e->sec[kind] = (int32_t)i;
    }
    return OK;
}

/* The last section named name, or -1 (for the few sections that are not a kernel's). */
static long find(Cubin *c, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = c->nsecs; i-- > 0;)
        if (c->secs[i].name_len == len && memcmp(c->secs[i].name, name, len) == 0)
            return (long)i;
    return -1;
}

static int read_sections(Cubin *c)
{
    const uint8_t *d = c->data;
    uint64_t n = c->n, shoff = u64(d + 40);
    uint16_t shentsize = u16(d + 58), shnum = u16(d + 60), shstrndx16 = u16(d + 62);
    if (shoff == 0)
        return fail(c, format("e_shnum"), "no section headers");
    if (shentsize != 64)
        return fail(c, format("e_shentsize"), "section header size %u, expected 64", shentsize);
    if (shoff > n || n - shoff < 64)
        return fail(c, format("e_shoff 0x%llx", (unsigned long long)shoff),
                    "section headers run past the end of the file (%llu bytes)", (unsigned long long)n);
    const uint8_t *zero = d + shoff;
    uint64_t count = shnum ? shnum : u64(zero + 32);
    uint64_t shstrndx = shstrndx16 == SHN_XINDEX ? u32(zero + 40) : shstrndx16;
    if (count > (n - shoff) / 64)
        return fail(c, format("e_shoff 0x%llx", (unsigned long long)shoff),
                    "%llu section headers run past the end of the file (%llu bytes)", (unsigned long long)count,
                    (unsigned long long)n);
    if (count == 0)
        return fail(c, format("e_shnum"), "no section headers");
    c->secs = PyMem_Malloc((size_t)count * sizeof(Section)); /* every field is set below */
    if (!c->secs) {
        PyErr_NoMemory();
        return FAIL;
    }
    c->nsecs = (size_t)count;
    for (size_t i = 0; i < c->nsecs; i++) {
        const uint8_t *h = d + shoff + 64 * i;
        Section *s = &c->secs[i];
        s->type = u32(h + 4);
        s->flags = u64(h + 8);
        s->offset = u64(h + 24);
        s->size = u64(h + 32);
        s->link = u32(h + 40);
        s->info = u32(h + 44);
        s->entsize = u64(h + 56);
    }
    for (size_t i = 0; i < c->nsecs; i++) { /* the first section, not NOBITS, past the end */
        const Section *s = &c->secs[i];
        if (s->type != SHT_NOBITS && (s->offset > n || s->size > n - s->offset))
            return fail(c, format("section %zu", i), "data at 0x%llx+0x%llx runs past the end of the file (%llu bytes)",
                        (unsigned long long)s->offset, (unsigned long long)s->size, (unsigned long long)n);
    }
    if (shstrndx == 0) {
        for (size_t i = 0; i < c->nsecs; i++)
            c->secs[i].name = "", c->secs[i].name_len = 0;
        return build_table(c);
    }
    if (shstrndx >= count)
        return fail(c, format("e_shstrndx"), "section name table index %llu >= %llu sections",
                    (unsigned long long)shstrndx, (unsigned long long)count);
    /* Python slices data[off:off+size], clipped to the buffer (a NOBITS table is not checked). */
    const Section *t = &c->secs[shstrndx];
    uint64_t start = t->offset < n ? t->offset : n;
    uint64_t len = t->size > n - start ? n - start : t->size;
    const uint8_t *strings = d + start;
    if (!is_ascii(strings, len))
        return BAIL;
    for (size_t i = 0; i < c->nsecs; i++) {
        uint32_t off = u32(d + shoff + 64 * i);
        if (name_at(c, strings, len, off, &c->secs[i].name, &c->secs[i].name_len, "section name table", NULL, 0,
                    i) != OK)
            return FAIL;
    }
    return build_table(c);
}

static const uint8_t *section_data(Cubin *c, const Section *s, uint64_t *len)
{
    if (s->type == SHT_NOBITS) {
        *len = 0;
        return c->data;
    }
    *len = s->size; /* in bounds: read_sections checked every section but NOBITS */
    return c->data + s->offset;
}

/* ---- .nv.info records (parsers.cubin._walk): the framing of every record is checked ------- */

typedef struct {
    uint8_t fmt, attr;
    uint16_t half;
    uint64_t pos;
} Record;

/* Check the framing of a whole section; the records are then read with next_record. */
static int walk_check(Cubin *c, const uint8_t *p, uint64_t n, const char *section, const char *name, size_t name_len)
{
    uint64_t pos = 0;
    while (pos < n) {
        if (n - pos < 4)
            return fail(c, format("%s%.*s+0x%llx", section, (int)name_len, name, (unsigned long long)pos),
                        "truncated attribute header (%llu of 4 bytes)", (unsigned long long)(n - pos));
        uint8_t fmt = p[pos], attr = p[pos + 1];
        uint16_t half = u16(p + pos + 2);
        if (fmt == EIFMT_SVAL) {
            if (pos + 4 + half > n)
                return fail(c, format("%s%.*s+0x%llx", section, (int)name_len, name, (unsigned long long)pos),
                            "attribute 0x%x payload of %u bytes runs past the section end (%llu bytes)", attr, half,
                            (unsigned long long)n);
            pos += 4 + half;
        } else if (fmt == EIFMT_HVAL || fmt == EIFMT_NVAL || fmt == EIFMT_BVAL) {
            pos += 4;
        } else {
            return fail(c, format("%s%.*s+0x%llx", section, (int)name_len, name, (unsigned long long)pos),
                        "unknown attribute format 0x%x (attribute 0x%x)", fmt, attr);
        }
    }
    return OK;
}

/* The record at *pos of a checked section, and *pos moved past it; 0 at the end. */
static int next_record(const uint8_t *p, uint64_t n, uint64_t *pos, Record *r)
{
    if (*pos >= n)
        return 0;
    r->pos = *pos;
    r->fmt = p[*pos];
    r->attr = p[*pos + 1];
    r->half = u16(p + *pos + 2);
    *pos += 4 + (r->fmt == EIFMT_SVAL ? r->half : 0);
    return 1;
}

/* ---- the cubin's tables: arch, symbols, global .nv.info, reserved shared memory ----------- */

static int read_arch(Cubin *c)
{
    int accel = 0;
    long at = find(c, ".nv.compat");
    if (at >= 0) {
        uint64_t n, pos = 0;
        const uint8_t *p = section_data(c, &c->secs[at], &n);
        if (walk_check(c, p, n, ".nv.compat", "", 0) != OK)
            return FAIL;
        Record r;
        while (next_record(p, n, &pos, &r))
            if (r.attr == EICOMPAT_ACCELERATOR &&
                ((r.fmt == EIFMT_BVAL && (r.half & 0xFF) == 1) || (r.fmt == EIFMT_HVAL && r.half == 1)))
                accel = 1;
    }
    unsigned sm;
    if (c->abi >= 8) {
        sm = (c->e_flags >> 8) & 0xFF;
        accel |= (c->e_flags & 0x8) != 0;
    } else {
        sm = c->e_flags & 0xFF;
        accel |= (c->e_flags & 0x800) != 0;
    }
    snprintf(c->arch, sizeof c->arch, "sm_%u%s", sm, accel ? "a" : "");
    return OK;
}

static int read_symbols(Cubin *c)
{
    long at = find(c, ".symtab");
    if (at < 0)
        return OK;
    const Section *s = &c->secs[at];
#define WHERE_SYMTAB "section %ld (%.*s)"
#define WHERE_ARGS at, (int)s->name_len, s->name
    if (s->type != SHT_SYMTAB && s->type != SHT_DYNSYM)
        return fail(c, format(WHERE_SYMTAB, WHERE_ARGS), "section type %u is not a symbol table", s->type);
    if ((s->entsize != 0 && s->entsize != 24) || s->size % 24)
        return fail(c, format(WHERE_SYMTAB, WHERE_ARGS),
                    "symbol table of %llu bytes with entry size %llu, expected a multiple of 24",
                    (unsigned long long)s->size, (unsigned long long)s->entsize);
    if (!(s->link > 0 && s->link < c->nsecs))
        return fail(c, format(WHERE_SYMTAB, WHERE_ARGS), "sh_link %u names no section (%zu sections)", s->link,
                    c->nsecs);
    const Section *strtab = &c->secs[s->link];
    uint64_t slen;
    const uint8_t *strings = section_data(c, strtab, &slen);
    int has_xindex = 0;
    for (size_t i = 0; i < c->nsecs; i++)
        if (c->secs[i].type == SHT_SYMTAB_SHNDX && c->secs[i].link == (uint64_t)at)
            has_xindex = 1;
    size_t count = (size_t)(s->size / 24);
    if (count == 0)
        return OK;
    if (!is_ascii(strings, slen))
        return BAIL;
    /* strtab.name in messages: a NUL-terminated copy of the section's name. */
    char *table = PyMem_Malloc(strtab->name_len + 1);
    c->syms = PyMem_Malloc(count * sizeof(Symbol)); /* every field is set below */
    if (!table || !c->syms) {
        PyMem_Free(table);
        return PyErr_NoMemory(), FAIL;
    }
    memcpy(table, strtab->name, strtab->name_len);
    table[strtab->name_len] = 0;
    c->nsyms = count;
    const uint8_t *p = c->data + s->offset;
    int status = OK;
    for (size_t i = 0; i < count && status == OK; i++, p += 24) {
        Symbol *y = &c->syms[i];
        status = name_at(c, strings, slen, u32(p), &y->name, &y->name_len, table, s, (size_t)at, i);
        y->info = p[4];
        y->other = p[5];
        y->shndx = u16(p + 6);
        y->value = u64(p + 8);
        if (y->shndx == SHN_XINDEX && has_xindex)
            status = status == OK ? BAIL : status; /* resolved through SHT_SYMTAB_SHNDX in Python */
    }
    PyMem_Free(table);
    return status;
#undef WHERE_SYMTAB
#undef WHERE_ARGS
}

static int symbol_named(const Symbol *y, const char *name)
{
    size_t len = strlen(name);
    return y->name_len == len && memcmp(y->name, name, len) == 0;
}

static void read_reserved(Cubin *c)
{
    /* A dict of every symbol's name -> value in Python: the last of a name wins. */
    int has_cap = 0, has_offset0 = 0;
    uint64_t cap = 0;
    for (size_t i = 0; i < c->nsyms; i++) {
        if (symbol_named(&c->syms[i], ".nv.reservedSmem.cap"))
            has_cap = 1, cap = c->syms[i].value;
        else if (symbol_named(&c->syms[i], ".nv.reservedSmem.offset0"))
            has_offset0 = 1;
    }
    c->reserved = c->e_type != ET_EXEC ? 0 : has_cap ? cap : has_offset0 ? RESERVED_SMEM_DEFAULT : 0;
}

static int keyed_slot(uint8_t attr)
{
    switch (attr) {
    case EIATTR_REGCOUNT: return K_REGCOUNT;
    case EIATTR_FRAME_SIZE: return K_FRAME;
    case EIATTR_MIN_STACK_SIZE: return K_MIN_STACK;
    case EIATTR_MAX_STACK_SIZE: return K_MAX_STACK;
    default: return -1;
    }
}

static int read_global_info(Cubin *c)
{
    if (c->nsyms) {
        c->keyed = PyMem_Calloc(c->nsyms, sizeof *c->keyed);
        c->has_keyed = PyMem_Calloc(c->nsyms, sizeof *c->has_keyed);
        if (!c->keyed || !c->has_keyed)
            return PyErr_NoMemory(), FAIL;
    }
    long at = find(c, ".nv.info");
    if (at < 0)
        return OK;
    uint64_t n, pos = 0;
    const uint8_t *p = section_data(c, &c->secs[at], &n);
    if (walk_check(c, p, n, ".nv.info", "", 0) != OK)
        return FAIL;
    Record r;
    while (next_record(p, n, &pos, &r)) {
        int slot = keyed_slot(r.attr);
        if (slot < 0 || r.fmt != EIFMT_SVAL)
            continue;
        if (r.half < 8)
            return fail(c, format(".nv.info+0x%llx", (unsigned long long)r.pos), "attribute 0x%x has %u bytes, 8 expected",
                        r.attr, r.half);
        uint32_t sym = u32(p + r.pos + 4), val = u32(p + r.pos + 8);
        if (sym < c->nsyms) { /* an index naming no symbol is kept by Python but never asked for */
            c->keyed[sym][slot] = val;
            c->has_keyed[sym][slot] = 1;
        }
    }
    return OK;
}

/* ---- one kernel (parsers.cubin._row and _kernel_attrs) ------------------------------------ */

static int payload(Cubin *c, const Record *r, unsigned size, const Symbol *y)
{
    if (r->fmt != EIFMT_SVAL || r->half < size)
        return fail(c, format(".nv.info.%.*s+0x%llx", (int)y->name_len, y->name, (unsigned long long)r->pos),
                    "attribute 0x%x: expected %u payload bytes", r->attr, size);
    return OK;
}

static int kernel_attrs(Cubin *c, Kernel *k, const Section *info)
{
    const Symbol *y = k->sym;
    uint64_t n = 0, pos = 0, kparams_end = 0;
    const uint8_t *p = info ? section_data(c, info, &n) : c->data;
    if (walk_check(c, p, n, ".nv.info.", y->name, y->name_len) != OK)
        return FAIL;
    int has_size = 0, has_cbank = 0;
    uint64_t size = 0, cbank = 0;
    Record r;
    while (next_record(p, n, &pos, &r)) {
        int value = r.fmt == EIFMT_BVAL || r.fmt == EIFMT_HVAL;
        uint64_t v = r.fmt == EIFMT_BVAL ? (r.half & 0xFF) : r.half;
        const uint8_t *at = p + r.pos + 4;
        switch (r.attr) {
        case EIATTR_KPARAM_INFO: { /* u32 index, u16 ordinal, u16 offset, u32 flags (size in 18..31) */
            if (payload(c, &r, 12, y) != OK)
                return FAIL;
            uint64_t end = (uint64_t)u16(at + 6) + ((u32(at + 8) >> 18) & 0x3FFF);
            if (k->params == 0 || end > kparams_end)
                kparams_end = end;
            k->params++;
            break;
        }
        case EIATTR_MAX_THREADS:
        case EIATTR_REQNTID: {
            if (payload(c, &r, 12, y) != OK)
                return FAIL;
            uint32_t *dims = r.attr == EIATTR_REQNTID ? k->reqntid : k->max_threads;
            dims[0] = u32(at), dims[1] = u32(at + 4), dims[2] = u32(at + 8);
            *(r.attr == EIATTR_REQNTID ? &k->has_reqntid : &k->has_max_threads) = 1;
            break;
        }
        case EIATTR_CBANK_PARAM_SIZE:
            if (value)
                has_size = 1, size = v;
            break;
        case EIATTR_PARAM_CBANK:
            if (payload(c, &r, 8, y) != OK)
                return FAIL;
            has_cbank = 1, cbank = u32(at + 4) >> 16;
            break;
        case EIATTR_MAXREG_COUNT:
            if (value)
                k->has_maxreg = 1, k->maxreg = v;
            break;
        case EIATTR_NUM_BARRIERS:
            if (value)
                k->has_barriers = 1, k->barriers = v;
            break;
        }
    }
    if (has_size)
        k->has_param = 1, k->param = size;
    else if (has_cbank)
        k->has_param = 1, k->param = cbank;
    else if (k->params)
        k->has_param = 1, k->param = kparams_end;
    return OK;
}

static int read_kernel(Cubin *c, Kernel *k, const Named *e, const Section *text, long info_at)
{
    const Symbol *y = k->sym;
    const Section *info = info_at >= 0 ? &c->secs[info_at] : NULL;
    if (kernel_attrs(c, k, info) != OK)
        return FAIL;
    size_t index = (size_t)(y - c->syms);
    const uint32_t *keyed = c->keyed[index];
    const uint8_t *has = c->has_keyed[index];
    if (has[K_REGCOUNT])
        k->has_regs = 1, k->regs = keyed[K_REGCOUNT];
    else if (text->info >> 24)
        k->has_regs = 1, k->regs = text->info >> 24;
    long shared = e->sec[S_SHARED], const0 = e->sec[S_CONST0], local = e->sec[S_LOCAL];
    if (shared >= 0) {
        uint64_t size = c->secs[shared].size;
        k->has_shared_sec = 1;
        k->shared_sec = size;
        k->reserved_used = size >= c->reserved ? c->reserved : 0;
        k->shared = size - k->reserved_used;
    }
    if (has[K_MIN_STACK]) {
        if (keyed[K_MIN_STACK] == STACK_UNKNOWN)
            k->stack_unknown = 1;
        else
            k->has_stack = 1, k->stack = keyed[K_MIN_STACK];
    }
    if (has[K_MAX_STACK])
        k->has_stack_max = 1, k->stack_max = keyed[K_MAX_STACK];
    if (has[K_FRAME])
        k->has_local = 1, k->local = keyed[K_FRAME];
    if (const0 >= 0)
        k->has_const0 = 1, k->const0 = c->secs[const0].size;
    k->local_sec = local >= 0 ? c->secs[local].size : 0;
    if (!k->has_barriers && (text->flags >> 20) & 0x7F)
        k->has_barriers = 1, k->barriers = (text->flags >> 20) & 0x7F; /* older ptxas: in sh_flags */
    else if (!k->has_barriers && info)
        k->has_barriers = 1, k->barriers = 0; /* ptxas writes NUM_BARRIERS only when one is used */
    return OK;
}

/* Every kernel entry, in symbol order (parsers.cubin.kernels). */
static int read_kernels(Cubin *c, Kernel **out, size_t *count)
{
    int marked = 0;
    for (size_t i = 0; i < c->nsyms; i++) {
        const Symbol *y = &c->syms[i];
        if ((y->info & 0xF) == STT_FUNC && y->shndx > 0 && y->shndx < SHN_LORESERVE && (y->other & STO_CUDA_ENTRY))
            marked = 1;
    }
    *out = c->nsyms ? PyMem_Malloc(c->nsyms * sizeof(Kernel)) : NULL; /* zeroed one by one, when used */
    if (c->nsyms && !*out)
        return PyErr_NoMemory(), FAIL;
    *count = 0;
    for (size_t i = 0; i < c->nsyms; i++) {
        const Symbol *y = &c->syms[i];
        if ((y->info & 0xF) != STT_FUNC || y->shndx == 0 || y->shndx >= SHN_LORESERVE)
            continue;
        const Named *e = slot(c, y->name, y->name_len); /* prefix + this name: the kernel's sections */
        long text = e->name ? e->sec[S_TEXT] : -1;
        if (text < 0 || (long)y->shndx != text)
            continue; /* a device function inside another kernel's text, or not ours */
        long info = e->sec[S_INFO];
        if (!(y->other & STO_CUDA_ENTRY) && (marked || info < 0))
            continue;
        Kernel *k = &(*out)[(*count)++];
        memset(k, 0, sizeof *k);
        k->sym = y;
        if (read_kernel(c, k, e, &c->secs[text], info) != OK)
            return FAIL;
    }
    return OK;
}

static int decode(Cubin *c)
{
    int status;
    if ((status = read_header(c)) != OK || (status = read_sections(c)) != OK || (status = read_arch(c)) != OK ||
        (status = read_symbols(c)) != OK)
        return status;
    read_reserved(c);
    return read_global_info(c);
}

static void release(Cubin *c)
{
    PyMem_Free(c->secs);
    PyMem_Free(c->table);
    PyMem_Free(c->syms);
    PyMem_Free(c->keyed);
    PyMem_Free(c->has_keyed);
}

/* ---- kernels(): tuples for KernelRecord ---------------------------------------------------- */

static PyObject *int_or_none(int has, uint64_t v)
{
    if (!has)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *dims_list(const uint32_t d[3])
{
    return Py_BuildValue("[kkk]", (unsigned long)d[0], (unsigned long)d[1], (unsigned long)d[2]);
}

/* x * y * z as a Python int (up to 96 bits). */
static PyObject *product(const uint32_t d[3])
{
    unsigned __int128 p = (unsigned __int128)d[0] * d[1] * d[2];
    if (p >> 64 == 0)
        return PyLong_FromUnsignedLongLong((uint64_t)p);
    PyObject *hi = PyLong_FromUnsignedLongLong((uint64_t)(p >> 64)), *lo = PyLong_FromUnsignedLongLong((uint64_t)p);
    PyObject *shift = PyLong_FromLong(64), *out = NULL;
    if (hi && lo && shift) {
        PyObject *up = PyNumber_Lshift(hi, shift);
        if (up) {
            out = PyNumber_Or(up, lo);
            Py_DECREF(up);
        }
    }
    Py_XDECREF(hi);
    Py_XDECREF(lo);
    Py_XDECREF(shift);
    return out;
}

static int set_item(PyObject *dict, const char *key, PyObject *value)
{
    if (!value)
        return FAIL;
    int rc = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return rc < 0 ? FAIL : OK;
}

/* extra, with the keys in the order parsers.cubin._row adds them. */
static PyObject *extra_of(Cubin *c, const Kernel *k)
{
    PyObject *e = PyDict_New();
    if (!e)
        return NULL;
    int ok = OK;
    if (k->has_shared_sec) {
        ok |= set_item(e, "shared_section_bytes", PyLong_FromUnsignedLongLong(k->shared_sec));
        ok |= set_item(e, "reserved_shared_bytes", PyLong_FromUnsignedLongLong(k->reserved_used));
    }
    if (k->stack_unknown)
        ok |= set_item(e, "stack_unknown", Py_NewRef(Py_True));
    if (k->has_stack_max)
        ok |= set_item(e, "stack_max", PyLong_FromUnsignedLongLong(k->stack_max));
    ok |= set_item(e, "params", PyLong_FromUnsignedLongLong(k->params));
    if (k->has_const0)
        ok |= set_item(e, "constant0_bytes", PyLong_FromUnsignedLongLong(k->const0));
    ok |= set_item(e, "local_section_bytes", PyLong_FromUnsignedLongLong(k->local_sec));
    ok |= set_item(e, "barriers", int_or_none(k->has_barriers, k->barriers));
    if (k->has_maxreg)
        ok |= set_item(e, "maxreg", PyLong_FromUnsignedLongLong(k->maxreg));
    if (k->has_reqntid)
        ok |= set_item(e, "reqntid", dims_list(k->reqntid));
    if (k->has_max_threads)
        ok |= set_item(e, "max_threads", dims_list(k->max_threads));
    ok |= set_item(e, "e_flags", PyLong_FromUnsignedLong(c->e_flags));
    ok |= set_item(e, "abi_version", PyLong_FromLong(c->abi));
    if (ok != OK) {
        Py_DECREF(e);
        return NULL;
    }
    return e;
}

static PyObject *kernel_tuple(Cubin *c, const Kernel *k)
{
    const uint32_t *bound = k->has_reqntid ? k->reqntid : k->has_max_threads ? k->max_threads : NULL;
    PyObject *block = k->has_reqntid ? Py_BuildValue("(kkk)", (unsigned long)k->reqntid[0],
                                                     (unsigned long)k->reqntid[1], (unsigned long)k->reqntid[2])
                                     : Py_NewRef(Py_None);
    PyObject *max_threads = bound ? product(bound) : Py_NewRef(Py_None);
    PyObject *extra = extra_of(c, k);
    PyObject *out = NULL;
    if (block && max_threads && extra)
        out = Py_BuildValue("(s#NNNNNOOO)", k->sym->name, (Py_ssize_t)k->sym->name_len,
                            int_or_none(k->has_regs, k->regs), PyLong_FromUnsignedLongLong(k->shared),
                            int_or_none(k->has_local, k->local), int_or_none(k->has_stack, k->stack),
                            int_or_none(k->has_param, k->param), max_threads, block, extra);
    Py_XDECREF(block);
    Py_XDECREF(max_threads);
    Py_XDECREF(extra);
    return out;
}

/* ---- the module ---------------------------------------------------------------------------- */

static PyObject *py_kernels(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer buf;
    Cubin c = {0};
    if (!PyArg_ParseTuple(args, "y*U:kernels", &buf, &c.file))
        return NULL;
    c.data = buf.buf;
    c.n = (uint64_t)buf.len;
    Kernel *ks = NULL;
    size_t count = 0;
    PyObject *out = NULL;
    int status = decode(&c);
    if (status == OK)
        status = read_kernels(&c, &ks, &count);
    if (status == BAIL)
        out = Py_NewRef(Py_None);
    else if (status == OK && (out = PyList_New((Py_ssize_t)count))) {
        for (size_t i = 0; i < count; i++) {
            PyObject *row = kernel_tuple(&c, &ks[i]);
            if (!row) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, (Py_ssize_t)i, row);
        }
        if (out) {
            PyObject *pair = Py_BuildValue("(sN)", c.arch, out);
            out = pair;
        }
    }
    PyMem_Free(ks);
    release(&c);
    PyBuffer_Release(&buf);
    return out;
}

static PyMethodDef methods[] = {
    {"kernels", py_kernels, METH_VARARGS,
     "kernels(data, file) -> None | (arch, [(name, registers, shared_bytes, local_bytes, stack_bytes, "
     "param_bytes, max_threads_per_block, block, extra), ...])"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "parsers._cubin",
    .m_doc = "Compiled cubin decoder (parsers/cubin.py is the reference).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__cubin(void)
{
    PyObject *base = PyImport_ImportModule("parsers.base");
    if (!base)
        return NULL;
    ParseError = PyObject_GetAttrString(base, "ParseError");
    Py_DECREF(base);
    if (!ParseError)
        return NULL;
    return PyModule_Create(&module);
}
