/* tests.c: jinja2's tests (x is defined, x is string, ...). */
#include <errno.h>
#include <string.h>

#include "tmpl.h"

int te_contains(trender *r, const tv *hay, const tv *needle, int *out);
int te_binop(trender *r, int op, const tv *a, const tv *b, tv *out);

#define TT_LIST(X)                                                             \
	X(odd, "odd")                                                          \
	X(even, "even")                                                        \
	X(divisibleby, "divisibleby")                                          \
	X(defined, "defined")                                                  \
	X(undefined, "undefined")                                              \
	X(filter, "filter")                                                    \
	X(test, "test")                                                        \
	X(none, "none")                                                        \
	X(boolean, "boolean")                                                  \
	X(false, "false")                                                      \
	X(true, "true")                                                        \
	X(integer, "integer")                                                  \
	X(float, "float")                                                      \
	X(lower, "lower")                                                      \
	X(upper, "upper")                                                      \
	X(string, "string")                                                    \
	X(mapping, "mapping")                                                  \
	X(number, "number")                                                    \
	X(sequence, "sequence")                                                \
	X(iterable, "iterable")                                                \
	X(callable, "callable")                                                \
	X(sameas, "sameas")                                                    \
	X(escaped, "escaped")                                                  \
	X(in, "in")                                                            \
	X(eqsym, "==")                                                         \
	X(eq, "eq")                                                            \
	X(equalto, "equalto")                                                  \
	X(nesym, "!=")                                                         \
	X(ne, "ne")                                                            \
	X(gtsym, ">")                                                          \
	X(gt, "gt")                                                            \
	X(greaterthan, "greaterthan")                                          \
	X(gesym, ">=")                                                         \
	X(ge, "ge")                                                            \
	X(ltsym, "<")                                                          \
	X(lt, "lt")                                                            \
	X(lessthan, "lessthan")                                                \
	X(lesym, "<=")                                                         \
	X(le, "le")

#define TT_ENUM(id, name) TT_##id,
enum { TT_LIST(TT_ENUM) TT_COUNT };

static const char *const tt_names[] = {
#define TT_ROW(id, name) name,
    TT_LIST(TT_ROW)};

int tt_lookup(const char *name, size_t n, int *supported)
{
	*supported = 1;
	for (int i = 0; i < TT_COUNT; i++)
		if (strlen(tt_names[i]) == n && !memcmp(tt_names[i], name, n))
			return i;
	return -1;
}

const char *tt_name(int id)
{
	return id >= 0 && id < TT_COUNT ? tt_names[id] : "?";
}

static int one_arg(trender *r, int id, int nargs, int nkw)
{
	if (nargs != 1 || nkw)
		return tr_fail(r, -EINVAL,
			       "TypeError: the test '%s' takes one "
			       "argument",
			       tt_name(id));
	return 0;
}

static int no_arg(trender *r, int id, int nargs, int nkw)
{
	if (nargs || nkw)
		return tr_fail(r, -EINVAL,
			       "TypeError: the test '%s' takes no "
			       "argument",
			       tt_name(id));
	return 0;
}

int tt_apply(trender *r, int id, const tv *in, tv *args, int nargs,
	     const tkw *kw, tv *kwv, int nkw, int *out)
{
	int e, sup;
	tv v, s;

	(void)kw;
	(void)kwv;
	switch (id) {
	case TT_odd:
	case TT_even:
	case TT_divisibleby:
		if ((e = id == TT_divisibleby ? one_arg(r, id, nargs, nkw)
					      : no_arg(r, id, nargs, nkw)))
			return e;
		if ((e = te_binop(r, OP_MOD, in,
				  id == TT_divisibleby
				      ? &args[0]
				      : &(tv){.k = TV_INT, .u.i = 2},
				  &v)))
			return e;
		return tv_eq(r, &v, &(tv){.k = TV_INT, .u.i = id == TT_odd},
			     out);
	case TT_in:
		if ((e = one_arg(r, id, nargs, nkw)))
			return e;
		return te_contains(r, &args[0], in, out);
	case TT_eqsym:
	case TT_eq:
	case TT_equalto:
	case TT_nesym:
	case TT_ne:
	case TT_gtsym:
	case TT_gt:
	case TT_greaterthan:
	case TT_gesym:
	case TT_ge:
	case TT_ltsym:
	case TT_lt:
	case TT_lessthan:
	case TT_lesym:
	case TT_le: {
		int op = id <= TT_equalto	? CMP_EQ
			 : id <= TT_ne		? CMP_NE
			 : id <= TT_greaterthan ? CMP_GT
			 : id <= TT_ge		? CMP_GE
			 : id <= TT_lessthan	? CMP_LT
						: CMP_LE;

		if ((e = one_arg(r, id, nargs, nkw)))
			return e;
		return tv_cmp_op(r, op, in, &args[0], out);
	}
	case TT_sameas:
		if ((e = one_arg(r, id, nargs, nkw)))
			return e;
		if (in->k == TV_NONE || in->k == TV_BOOL ||
		    args[0].k == TV_NONE || args[0].k == TV_BOOL) {
			*out = in->k == args[0].k &&
			       (in->k == TV_NONE || in->u.i == args[0].u.i);
			return 0;
		}
		if (in->k == TV_INT || in->k == TV_FLOAT || in->k == TV_STR ||
		    in->k == TV_UNDEF || in->k == TV_TUPLE ||
		    in->k == TV_RANGE || in->k == TV_VIEW || in->k == TV_METHOD)
			return te_unsupported(r,
					      "'sameas' of a number, string "
					      "or tuple (Python's identity)");
		*out = in->k == args[0].k && in->u.p == args[0].u.p;
		return 0;
	default:
		break;
	}
	if ((e = no_arg(r, id, nargs, nkw)))
		return e;
	switch (id) {
	case TT_defined:
		*out = in->k != TV_UNDEF;
		return 0;
	case TT_undefined:
		*out = in->k == TV_UNDEF;
		return 0;
	case TT_filter:
	case TT_test:
		if (in->k != TV_STR) {
			*out = 0;
			return 0;
		}
		*out = (id == TT_filter ? tf_lookup(in->u.s, in->n, &sup)
					: tt_lookup(in->u.s, in->n, &sup)) >= 0;
		return 0;
	case TT_none:
		*out = in->k == TV_NONE;
		return 0;
	case TT_boolean:
		*out = in->k == TV_BOOL;
		return 0;
	case TT_false:
		*out = in->k == TV_BOOL && !in->u.i;
		return 0;
	case TT_true:
		*out = in->k == TV_BOOL && in->u.i;
		return 0;
	case TT_integer:
		*out = in->k == TV_INT;
		return 0;
	case TT_float:
		*out = in->k == TV_FLOAT;
		return 0;
	case TT_number:
		*out = in->k == TV_INT || in->k == TV_FLOAT || in->k == TV_BOOL;
		return 0;
	case TT_string:
		*out = in->k == TV_STR;
		return 0;
	case TT_mapping:
		*out = tv_is_mapping(in);
		return 0;
	case TT_sequence:
		*out = in->k == TV_STR || tv_is_seq(in) || tv_is_mapping(in) ||
		       in->k == TV_RANGE || in->k == TV_UNDEF;
		return 0;
	case TT_iterable:
		*out = in->k == TV_STR || tv_is_seq(in) || tv_is_mapping(in) ||
		       in->k == TV_RANGE || in->k == TV_UNDEF ||
		       in->k == TV_VIEW || in->k == TV_ITER || in->k == TV_LOOP;
		return 0;
	case TT_callable:
		*out = in->k == TV_MACRO || in->k == TV_FUNC ||
		       in->k == TV_METHOD || in->k == TV_UNDEF ||
		       in->k == TV_LOOP;
		return 0;
	case TT_escaped:
		*out = in->k == TV_STR && (in->f & TVF_MARKUP);
		return 0;
	case TT_lower:
	case TT_upper:
		if ((e = py_str_value(r, in, &s)))
			return e;
		return tm_call(
			   r, &s,
			   tm_lookup(id == TT_lower ? "islower" : "isupper", 7),
			   NULL, 0, NULL, NULL, 0, &v)
			   ?: (*out = (int)v.u.i, 0);
	default:
		return tr_fail(r, -EINVAL, "the test '%s' is not supported",
			       tt_name(id));
	}
}

int tt_apply_name(trender *r, const char *name, size_t n, const tv *in,
		  tv *args, int nargs, const tkw *kw, tv *kwv, int nkw,
		  int *out)
{
	int ok = 1, id = tt_lookup(name, n, &ok);

	if (id < 0)
		return tr_fail(r, -EINVAL, "No test named '%.*s'.",
			       (int)(n > 60 ? 60 : n), name);
	return tt_apply(r, id, in, args, nargs, kw, kwv, nkw, out);
}
