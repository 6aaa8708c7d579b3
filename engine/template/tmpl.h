/* tmpl.h: what the files of engine/template share: the arena, values, the
 * syntax tree, the render state and the helpers each file exports.
 *
 * Values are Python's as jinja2 sees them. A value is 16 bytes and never
 * owns memory: strings, lists and the rest live in the render's arena (or
 * in the caller's JSON, which a value may point at: JSON arrays and
 * objects are read in place, never copied). */
#ifndef TACO_TMPL_H
#define TACO_TMPL_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "template/template.h"

/* ---- arena (arena.c) ----------------------------------------------- */

typedef struct ta_chunk ta_chunk;

/* A bump allocator. used counts every byte taken from malloc (chunks and
 * the buffers charged with ta_charge); past limit, allocations fail. */
typedef struct tarena {
	ta_chunk *head;
	char *cur, *end;
	size_t used, limit;
} tarena;

void ta_init(tarena *a, size_t limit);
/* n bytes aligned for any value; NULL past the limit or out of memory */
void *ta_alloc(tarena *a, size_t n);
/* Grows the last block allocated: p (of old bytes, the most recent
 * allocation) to n bytes in place when it can, else a copy. */
void *ta_grow(tarena *a, void *p, size_t old, size_t n);
/* Charges (or, negative, refunds) bytes malloc'd outside the arena. */
int ta_charge(tarena *a, ptrdiff_t n);
void ta_free(tarena *a);

/* ---- values (value.c) ---------------------------------------------- */

enum {
	TV_UNDEF, /* jinja2's Undefined: u.undef (NULL: no hint) */
	TV_NONE,
	TV_BOOL,   /* u.i: 0 or 1 */
	TV_INT,	   /* u.i */
	TV_FLOAT,  /* u.d */
	TV_STR,	   /* u.s, n bytes of UTF-8; f: TVF_MARKUP */
	TV_LIST,   /* u.items, n of them */
	TV_TUPLE,  /* u.items, n of them */
	TV_DICT,   /* u.dict */
	TV_JARR,   /* u.j, a JSON array */
	TV_JOBJ,   /* u.j, a JSON object */
	TV_NS,	   /* u.ns: jinja2's Namespace */
	TV_RANGE,  /* u.range */
	TV_ITER,   /* u.it: a one-pass iterator (generators, reversed) */
	TV_VIEW,   /* dict_keys, dict_values, dict_items: x, u.view */
	TV_LOOP,   /* u.loop: a for loop's LoopContext */
	TV_MACRO,  /* u.macro */
	TV_FUNC,   /* a global function: x */
	TV_METHOD, /* a bound method: x, u.bound */
	TV_KINDS
};

#define TVF_MARKUP 1 /* TV_STR: markupsafe's Markup (|safe, |escape) */

typedef struct tv tv;
typedef struct tdict tdict;
typedef struct tns tns;
typedef struct titer titer;
typedef struct tloop tloop;
typedef struct tmacro tmacro;
typedef struct tundef tundef;

struct tv {
	uint8_t k;
	uint8_t f;
	uint16_t x;
	uint32_t n;
	union {
		int64_t i;
		double d;
		const char *s;
		tv *items;
		tdict *dict;
		const json_t *j;
		tns *ns;
		struct trange *range;
		titer *it;
		tv *view; /* the dict a view is of */
		tloop *loop;
		tmacro *macro;
		tv *bound; /* a method's object */
		tundef *undef;
		void *p;
	} u;
};

/* A view's kind (tv.x of TV_VIEW) */
enum { TVIEW_KEYS, TVIEW_VALUES, TVIEW_ITEMS };

/* Why a value is undefined: the message jinja2 gives when it is used. */
struct tundef {
	const char *msg;  /* a message of its own, or NULL */
	const char *name; /* the name or attribute, n bytes */
	uint32_t n;
	int8_t of_kind;	  /* the object's kind (attribute), or -1 */
	uint8_t security; /* an unsafe attribute: SecurityError */
	uint8_t elem;	  /* "has no element" rather than attribute */
};

struct tdict {
	uint32_t n, cap;
	tv *keys, *vals;
	uint32_t *index; /* open addressing over 2*cap slots, or NULL */
	uint32_t nindex;
};

struct tns {
	tdict attrs; /* mutable: {% set ns.x = ... %} */
};

struct trange {
	int64_t start, stop, step, len;
};

/* ---- syntax tree (parse.c) ----------------------------------------- */

enum {
	/* expressions */
	N_CONST,   /* cval */
	N_NAME,	   /* id */
	N_LIST,	   /* kids */
	N_TUPLE,   /* kids */
	N_DICT,	   /* kids: key, value, key, value... */
	N_GETATTR, /* a.str; id: method id or -1 */
	N_GETITEM, /* a[b] */
	N_SLICE,   /* a[b:c:d], any of b c d NULL */
	N_CALL,	   /* a(kids, kw) */
	N_FILTER,  /* a|id(kids, kw); a NULL in a filter block */
	N_TEST,	   /* a is id(kids, kw) */
	N_BINOP,   /* a op b */
	N_CONCAT,  /* kids joined with ~ */
	N_COMPARE, /* a, then kids: each an N_OPERAND (op, a) */
	N_OPERAND,
	N_AND,
	N_OR,
	N_NOT,
	N_NEG,
	N_POS,
	N_CONDEXPR, /* b if a else c (c NULL: undefined) */
	/* statements */
	N_BODY,	       /* kids */
	N_OUTPUT,      /* kids: N_CONST strings (data) and expressions */
	N_IF,	       /* if a: kids (body) else b (N_BODY or N_IF) */
	N_FOR,	       /* for a in b if c: kids else d */
	N_SET,	       /* a = b */
	N_SETBLOCK,    /* a = (kids rendered) | filter chain b */
	N_MACRO,       /* id: name; params kids (N_NAME), defaults dflt */
	N_CALLBLOCK,   /* call b: caller params kids, body d */
	N_FILTERBLOCK, /* b: filter chain, body kids */
	N_WITH,	       /* targets a (N_TUPLE of N_NAME), values b, body */
	N_GENERATION,  /* body kids */
	N_BREAK,
	N_CONTINUE,
	N_NSREF, /* assignment target ns.attr: id (the name), str */
	N_KINDS
};

/* binary operators (N_BINOP op) */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW };
/* comparison operators (N_OPERAND op) */
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

typedef struct tnode tnode;

typedef struct tkw {
	const char *name;
	uint32_t n;
	tnode *val;
} tkw;

struct tnode {
	uint8_t kind;
	uint8_t op;
	uint8_t flags; /* NF_* */
	uint16_t h;    /* height of the subtree */
	int32_t id;    /* name, filter, test or method id */
	int line;
	tnode *a, *b, *c, *d;
	tnode **kids;
	int nkids;
	tkw *kw;
	int nkw;
	tnode **dflt; /* N_MACRO, N_CALLBLOCK: defaults of the last params */
	int ndflt;
	tv cval;
	const char *str; /* attribute, filter or test name */
	uint32_t slen;
	int32_t *pre; /* a frame's names undefined on entry (scope.c) */
	int npre;
};

/* tnode.flags */
#define NF_SOFT 1	  /* unknown filter or test: an error when evaluated */
#define NF_VARARGS 2	  /* N_MACRO: the body reads varargs */
#define NF_KWARGS 4	  /* N_MACRO: the body reads kwargs */
#define NF_CALLER 8	  /* N_MACRO: the body reads caller */
#define NF_UNSUPPORTED 16 /* a known filter or test the language lacks */
#define NF_DYNAMIC 32	  /* reads a name or calls: never constant (fold.c) */
#define NF_QUIRK                                                               \
	64 /* a constant jinja2 writes into its Python code:                   \
	    * inf or nan there is a NameError, and a negative                  \
	    * number left of ** is -(x ** y) (fold.c) */

/* The interned names of a template. */
typedef struct tname {
	const char *s;
	uint32_t n;
} tname;

struct taco_tmpl {
	tarena arena; /* the tree, the names, the source */
	tnode *root;  /* N_BODY */
	tname *names;
	int nnames;
	int id_loop, id_caller, id_varargs, id_kwargs;
};

/* ---- lexer (lex.c) -------------------------------------------------- */

enum {
	T_EOF,
	T_DATA,
	T_VAR_BEGIN,
	T_VAR_END,
	T_BLOCK_BEGIN,
	T_BLOCK_END,
	T_NAME,
	T_STRING,
	T_INT,
	T_FLOAT,
	T_OP
};

/* operators (T_OP op) */
enum {
	TO_ADD,
	TO_SUB,
	TO_DIV,
	TO_FLOORDIV,
	TO_MUL,
	TO_MOD,
	TO_POW,
	TO_TILDE,
	TO_LBRACKET,
	TO_RBRACKET,
	TO_LPAREN,
	TO_RPAREN,
	TO_LBRACE,
	TO_RBRACE,
	TO_EQ,
	TO_NE,
	TO_GT,
	TO_GTEQ,
	TO_LT,
	TO_LTEQ,
	TO_ASSIGN,
	TO_DOT,
	TO_COLON,
	TO_PIPE,
	TO_COMMA,
	TO_SEMICOLON
};

typedef struct ttok {
	uint8_t type;
	uint8_t op;
	int line;
	const char *s; /* data, name or decoded string */
	uint32_t n;
	int64_t i;
	double d;
} ttok;

/* Tokenizes src (newlines already normalized) into *toks (in a). On
 * error, -EINVAL with "line N: ..." in err. */
int tl_lex(tarena *a, const char *src, size_t len, ttok **toks, int *ntoks,
	   taco_err *err);

/* ---- unicode (unicode.c) ------------------------------------------- */

uint16_t tu_flags(uint32_t cp);
int tu_isspace(uint32_t cp);
/* Decodes the well-formed UTF-8 char at s (n > 0 bytes): its length */
size_t tu_dec(const char *s, size_t n, uint32_t *cp);
size_t tu_enc(uint32_t cp, char *out);
/* 1 when s[0..n) is well-formed UTF-8 without surrogates */
int tu_valid(const char *s, size_t n);
/* code points in s[0..n) */
size_t tu_count(const char *s, size_t n);
/* byte offset of code point i in s[0..n) (n when i is past the end) */
size_t tu_offset(const char *s, size_t n, size_t i);
/* Full case mappings: writes up to 3 code points, returns how many. */
int tu_lower1(uint32_t cp, uint32_t *out);
int tu_upper1(uint32_t cp, uint32_t *out);
int tu_title1(uint32_t cp, uint32_t *out);

/* ---- render state (eval.c) ----------------------------------------- */

typedef struct tscope tscope;

typedef struct tslot {
	int32_t id;
	tv v;
} tslot;

struct tscope {
	tscope *parent;
	uint32_t n, cap;
	tslot *slots;
	tslot inl[4];
};

struct tmacro {
	const tnode *def; /* N_MACRO, or N_CALLBLOCK for caller */
	tscope *closure;
	const tnode *body; /* N_BODY */
	const char *name;
	uint32_t nlen;
};

/* A growable output buffer (malloc'd, charged to the arena). */
typedef struct tbuf {
	char *p;
	size_t n, cap;
} tbuf;

typedef struct tctxslot {
	uint8_t state; /* 0 unknown, 1 found, 2 absent */
	tv v;
} tctxslot;

typedef struct trender {
	const taco_tmpl *t;
	const json_t *ctx;
	tarena a;
	taco_tmpl_limits lim;
	int64_t now;
	uint64_t steps;
	int depth;   /* macro calls and loops */
	int rdepth;  /* C recursion: evaluations, repr and json nesting */
	int line;    /* line of the node being evaluated */
	tbuf *out;   /* where output goes now */
	tbuf root;   /* the render's output */
	tbuf **caps; /* capture buffers, by level */
	int ncaps, capcap, capdepth;
	size_t *gen;
	int ngen, gencap;
	tctxslot *ctxc; /* per name id */
	taco_err *err;
	int errset;
	int errcode;   /* the code of the first error (with its message) */
	int in_gen;    /* inside a {% generation %} block */
	int constmode; /* folding constants: a failed slice is undefined */
	int folding;   /* folding: names and calls are not constants */
} trender;

/* Fails the render: -code with "line N: msg" (once: the first wins). */
int tr_fail(trender *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* nested evaluations in C (expressions, statements, macro calls, values
 * printed or compared): the bound of a render's stack, about 1 MiB */
#define TR_LIMIT_RDEPTH 1000

/* a step: -E2BIG past max_steps */
static inline int tr_step(trender *r)
{
	if (++r->steps > r->lim.max_steps)
		return tr_fail(r, -E2BIG, "max_steps exceeded (%llu)",
			       (unsigned long long)r->lim.max_steps);
	return 0;
}
int tr_enter(trender *r); /* rdepth++ with its bound */
static inline void tr_leave(trender *r)
{
	r->rdepth--;
}

void *tr_alloc(trender *r, size_t n); /* sets the error on failure */
int tr_oom(trender *r);

/* ---- buffers (value.c) --------------------------------------------- */

int tb_put(trender *r, tbuf *b, const char *s, size_t n);
int tb_putc(trender *r, tbuf *b, char c);
int tb_printf(trender *r, tbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* the buffer's bytes as a string value in the arena; empties the buffer */
int tb_take(trender *r, tbuf *b, tv *out);
void tb_free(trender *r, tbuf *b);

/* ---- value helpers (value.c) --------------------------------------- */

static inline tv tv_undef(void)
{
	tv v = {TV_UNDEF, 0, 0, 0, {.p = NULL}};
	return v;
}
static inline tv tv_none(void)
{
	tv v = {TV_NONE, 0, 0, 0, {.p = NULL}};
	return v;
}
static inline tv tv_bool(int b)
{
	tv v = {TV_BOOL, 0, 0, 0, {.i = b != 0}};
	return v;
}
static inline tv tv_int(int64_t i)
{
	tv v = {TV_INT, 0, 0, 0, {.i = i}};
	return v;
}
static inline tv tv_float(double d)
{
	tv v = {TV_FLOAT, 0, 0, 0, {.d = d}};
	return v;
}
static inline tv tv_str(const char *s, size_t n)
{
	tv v = {TV_STR, 0, 0, (uint32_t)n, {.s = s}};
	return v;
}
#define TV_LIT(lit) tv_str(lit, sizeof(lit) - 1)

/* The undefined value of a name that is not there (interned name id). */
static inline tv tv_undef_id(int id)
{
	tv v = {TV_UNDEF, 0, 0, (uint32_t)id + 1, {.p = NULL}};
	return v;
}

/* A JSON node as a value (no copy). */
tv tv_json(const json_t *j);
/* An undefined value with a message (static) or name. */
tv tv_undef_msg(trender *r, const char *msg);
tv tv_undef_name(trender *r, const char *name, size_t n);
tv tv_undef_attr(trender *r, const tv *obj, const char *name, size_t n,
		 int elem);
tv tv_unsafe(trender *r, const tv *obj, const char *name, size_t n);
/* the error an undefined value raises when used */
int tv_undef_fail(trender *r, const tv *u);
/* a new string of n bytes (written by the caller) */
int tv_newstr(trender *r, size_t n, tv *out, char **buf);
int tv_newlist(trender *r, uint32_t n, int tuple, tv *out);

const char *tv_typename(const tv *v); /* Python's type name */
int tv_truthy(trender *r, const tv *v, int *out);
/* len(): -1 when v has none (the caller's TypeError) */
int tv_len(trender *r, const tv *v, int64_t *out);
int tv_is_mapping(const tv *v);
int tv_is_seq(const tv *v); /* list, tuple or JSON array */
/* v[i] of a list, tuple or JSON array, 0 <= i < len */
tv tv_seq_at(const tv *v, size_t i);
size_t tv_seq_len(const tv *v);
/* Python's ==; errors only on nesting too deep */
int tv_eq(trender *r, const tv *a, const tv *b, int *out);
/* Python's <: a TypeError between kinds that do not order */
int tv_lt(trender *r, const tv *a, const tv *b, int *out);
int tv_cmp_op(trender *r, int op, const tv *a, const tv *b, int *out);
int tv_hashable(const tv *v);
/* Looks key up in a dict or JSON object: 1 found, 0 absent */
int tv_map_get(trender *r, const tv *map, const tv *key, tv *out);
int tv_map_gets(const tv *map, const char *k, size_t n, tv *out);
size_t tv_map_len(const tv *map);

/* dicts built by templates */
int td_init(trender *r, tdict *d, uint32_t cap);
int td_set(trender *r, tdict *d, const tv *key, const tv *val);
int td_get(trender *r, const tdict *d, const tv *key, tv *out);
int tv_newdict(trender *r, uint32_t cap, tv *out);

/* ---- iteration (iter.c) -------------------------------------------- */

/* A cursor over an iterable, on the caller's stack. */
typedef struct tcur {
	uint8_t kind;
	tv src;
	size_t i, n;
	void *jit;
	titer *it;
} tcur;

int tc_open(trender *r, const tv *v, tcur *c);
/* 1: *out is the next item; 0: the end; < 0: an error */
int tc_next(trender *r, tcur *c, tv *out);
/* len of what a cursor iterates when known without consuming (-1) */
int64_t tc_len(const tcur *c);
/* list(v) */
int tv_to_list(trender *r, const tv *v, tv *out);

enum {
	TI_CUR,	     /* a cursor (iter() of a value) */
	TI_REVERSED, /* reversed() of a sequence */
	TI_SELECT,   /* select, reject, selectattr, rejectattr */
	TI_MAP,
	TI_UNIQUE,
	TI_BATCH,
	TI_SLICE,
	TI_ITEMS, /* |items */
	TI_LOOPFILTER
};

struct titer {
	uint8_t kind;
	uint8_t done;
	uint8_t started;
	uint8_t reject, attr; /* select family */
	tcur src;
	tv seq;		  /* TI_REVERSED: the sequence */
	int64_t pos;	  /* TI_REVERSED: next index */
	const char *name; /* filter or test name (map, select) */
	uint32_t nlen;
	int fid;  /* filter or test id */
	tv *args; /* extra arguments */
	int nargs;
	tkw *kw; /* keyword names (values in kwv) */
	tv *kwv;
	int nkw;
	tv attrpath; /* attribute (map attribute=, selectattr, unique) */
	tv dflt;     /* map default= */
	int has_dflt;
	int case_sensitive;
	tdict seen;    /* unique */
	int64_t count; /* batch linecount / slice slices */
	tv *bitems;    /* batch: the list being filled */
	size_t bn, bcap;
	tv fill;
	int has_fill;
	tv slice_list; /* slice: the materialized sequence */
	int64_t slice_no, slice_off;
	/* TI_LOOPFILTER */
	const tnode *target, *test;
	tscope *scope;
};

struct tloop {
	tcur cur;
	int64_t index0;
	int64_t length; /* -1 until known */
	tv before, current, after;
	int has_after; /* after holds a peeked item */
	int after_end; /* the peek found the end */
	tv last_changed;
	int has_changed;
	int depth0;
};

/* ---- Python formatting (pyfmt.c) ----------------------------------- */

/* str(v) appended to b */
int py_str(trender *r, tbuf *b, const tv *v);
/* repr(v) appended to b */
int py_repr(trender *r, tbuf *b, const tv *v);
/* str(v) as a value (no copy for strings) */
int py_str_value(trender *r, const tv *v, tv *out);
/* Python's repr of a float */
void py_float_repr(double d, char *out, size_t cap);
typedef struct tjson_opts {
	int ensure_ascii;
	int sort_keys;
	int has_indent;
	const char *indent; /* indent string */
	size_t indent_n;
	const char *item_sep, *key_sep;
	size_t item_sep_n, key_sep_n;
} tjson_opts;
/* json.dumps(v, ...) appended to b */
int py_json(trender *r, tbuf *b, const tv *v, const tjson_opts *o);
/* fmt % args: printf-style formatting */
int py_percent(trender *r, const tv *fmt, const tv *args, tv *out);
/* str.format */
int py_format(trender *r, const tv *fmt, const tv *args, int nargs,
	      const tkw *kw, const tv *kwv, int nkw, tv *out);
/* Python's float(str) and int(str, base): 0 or -EINVAL when invalid */
int py_parse_float(const char *s, size_t n, double *out);
int py_parse_int(const char *s, size_t n, int base, int64_t *out);

/* ---- Python str operations (strops.c) ------------------------------ */

enum { CASE_LOWER, CASE_UPPER, CASE_TITLE, CASE_CAPITALIZE, CASE_SWAP };
int ps_case(trender *r, const tv *s, int how, tv *out);
/* strip: which 1 left, 2 right, 3 both; chars NULL: whitespace */
tv ps_strip(const tv *s, const tv *chars, int which);
int ps_find(const char *h, size_t hn, const char *n, size_t nn, size_t from);
int ps_replace(trender *r, const tv *s, const tv *old, const tv *new_,
	       int64_t count, tv *out);
int ps_split(trender *r, const tv *s, const tv *sep, int64_t maxsplit,
	     int right, tv *out);
int ps_splitlines(trender *r, const tv *s, int keepends, tv *out);
int ps_join(trender *r, const tv *sep, const tv *items, tv *out);
int ps_concat(trender *r, const tv *a, const tv *b, tv *out);
int ps_repeat(trender *r, const tv *s, int64_t n, tv *out);
int ps_escape(trender *r, const tv *s, tv *out); /* markupsafe.escape */
int ps_slice(trender *r, const tv *s, int64_t start, int64_t stop, int64_t step,
	     tv *out);

/* ---- evaluation (eval.c, stmt.c) ----------------------------------- */

int te_eval(trender *r, const tnode *n, tscope *s, tv *out);
int te_exec(trender *r, const tnode *body, tscope *s);
/* calls a callable value with evaluated arguments */
int te_call_value(trender *r, const tv *fn, tv *args, int nargs, const tkw *kw,
		  tv *kwv, int nkw, tv *out);
int te_getattr(trender *r, const tv *obj, const char *name, size_t n,
	       int method, tv *out);
int te_getitem(trender *r, const tv *obj, const tv *key, tv *out);
/* calls macro m, its output in *out */
int te_call_macro(trender *r, const tmacro *m, tv *args, int nargs,
		  const tkw *kw, tv *kwv, int nkw, const tv *caller, tv *out);
int te_unsupported(trender *r, const char *what);

/* scopes */
tscope *ts_new(trender *r, tscope *parent);
/* sets the names of frame node n that start undefined (scope.c) */
int ts_pre(trender *r, tscope *s, const tnode *n);
int ts_set(trender *r, tscope *s, int id, const tv *v);
int ts_lookup(trender *r, tscope *s, int id, tv *out);

/* ---- filters, tests, methods, globals ------------------------------ */

/* ids by name: -1 unknown; *supported 0 for jinja2's filters and tests
 * the language here lacks */
int tf_lookup(const char *name, size_t n, int *supported);
int tt_lookup(const char *name, size_t n, int *supported);
int tm_lookup(const char *name, size_t n); /* method or -1 */
const char *tf_name(int id);
const char *tt_name(int id);
const char *tm_name(int id);

int tf_apply(trender *r, int id, const tv *in, tv *args, int nargs,
	     const tkw *kw, tv *kwv, int nkw, tv *out);
int tt_apply(trender *r, int id, const tv *in, tv *args, int nargs,
	     const tkw *kw, tv *kwv, int nkw, int *out);
/* filters and tests by name at run time (map, select) */
int tf_apply_name(trender *r, const char *name, size_t n, const tv *in,
		  tv *args, int nargs, const tkw *kw, tv *kwv, int nkw,
		  tv *out);
int tt_apply_name(trender *r, const char *name, size_t n, const tv *in,
		  tv *args, int nargs, const tkw *kw, tv *kwv, int nkw,
		  int *out);

/* the method of obj named id when obj has it: 1 (the method, *kind set),
 * 0 none, or an unsafe one (2) */
int tm_has(const tv *obj, int id);
int tm_call(trender *r, const tv *obj, int id, tv *args, int nargs,
	    const tkw *kw, tv *kwv, int nkw, tv *out);

enum {
	TG_RANGE,
	TG_DICT,
	TG_NAMESPACE,
	TG_RAISE,
	TG_STRFTIME,
	TG_LIPSUM,
	TG_CYCLER,
	TG_JOINER,
	TG_COUNT
};
int tg_lookup(const char *name, size_t n); /* global or -1 */
const char *tg_name(int id);
int tg_call(trender *r, int id, tv *args, int nargs, const tkw *kw, tv *kwv,
	    int nkw, tv *out);

/* keyword and positional arguments of a builtin: binds args and kw to
 * the names in spec (NULL-terminated), in order; missing ones are
 * TV_UNDEF with *has 0. -EINVAL on an unknown or repeated one. */
int targs_bind(trender *r, const char *what, const char *const *spec, tv *args,
	       int nargs, const tkw *kw, tv *kwv, int nkw, tv *vals, int *has);

/* an int argument (bool and int; float is a TypeError) */
int targ_int(trender *r, const char *what, const tv *v, int64_t *out);

#endif
