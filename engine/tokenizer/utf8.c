/* utf8.c: byte buffers, UTF-8 (decoding, encoding, the maximal-subpart
 * rule for invalid input), White_Space, and GPT-2's byte-level alphabet. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* ------------------------------------------------------------ buffers */

int tok_buf_reserve(struct tok_buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (extra > SIZE_MAX / 2 - b->n)
		return -ENOMEM;
	need = b->n + extra + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int tok_buf_put(struct tok_buf *b, const void *p, size_t n)
{
	if (tok_buf_reserve(b, n))
		return -ENOMEM;
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

void tok_buf_free(struct tok_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

/* ------------------------------------------------------------ UTF-8 */

int tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];

	if (c < 0x80 || n < 2) {
		*cp = c;
		return 1;
	}
	if (c < 0xE0) {
		*cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
		return 2;
	}
	if (c < 0xF0 || n < 4) {
		if (n < 3) {
			*cp = c;
			return 1;
		}
		*cp = ((uint32_t)(c & 0x0F) << 12) |
		      ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
		return 3;
	}
	*cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
	      ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
	return 4;
}

int tok_utf8_put(uint32_t cp, char *out)
{
	unsigned char *o = (unsigned char *)out;

	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xC0 | (cp >> 6));
		o[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | (cp >> 12));
		o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | (cp >> 18));
	o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Well-formed UTF-8 (Unicode table 3-7). Returns the length of the
 * sequence at s, or 0 and in *bad the length of its maximal subpart (the
 * longest prefix of a well-formed sequence, at least 1). */
size_t tok_utf8_valid_prefix(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t need, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 1;
	else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		*bad = 1;
		return 0;
	}
	for (i = 1; i <= need; i++) {
		if (i >= n || s[i] < lo || s[i] > hi) {
			*bad = i;
			return 0;
		}
		lo = 0x80;
		hi = 0xBF;
	}
	return need + 1;
}

int tok_utf8_lossy(struct tok_buf *out, const unsigned char *s, size_t n)
{
	static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
	size_t i = 0, run = 0, k, bad;

	if (!n)
		return tok_buf_put(out, "", 0);
	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		k = tok_utf8_valid_prefix(s + i, n - i, &bad);
		if (k) {
			i += k;
			continue;
		}
		if (tok_buf_put(out, s + run, i - run) ||
		    tok_buf_put(out, fffd, 3))
			return -ENOMEM;
		i += bad;
		run = i;
	}
	return tok_buf_put(out, s + run, n - run);
}

/* Rust char::is_whitespace: the White_Space property. */
int tok_is_whitespace(uint32_t c)
{
	if (c < 0x80)
		return c == ' ' || (c >= 9 && c <= 13);
	return c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ------------------------------------------------------------ byte level */

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the others
 * to U+0100 and up in byte order. */
const uint16_t tok_byte_char[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270,
    271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285,
    286, 287, 288, 33,	34,  35,  36,  37,  38,	 39,  40,  41,	42,  43,  44,
    45,	 46,  47,  48,	49,  50,  51,  52,  53,	 54,  55,  56,	57,  58,  59,
    60,	 61,  62,  63,	64,  65,  66,  67,  68,	 69,  70,  71,	72,  73,  74,
    75,	 76,  77,  78,	79,  80,  81,  82,  83,	 84,  85,  86,	87,  88,  89,
    90,	 91,  92,  93,	94,  95,  96,  97,  98,	 99,  100, 101, 102, 103, 104,
    105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119,
    120, 121, 122, 123, 124, 125, 126, 289, 290, 291, 292, 293, 294, 295, 296,
    297, 298, 299, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311,
    312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322, 161, 162, 163, 164,
    165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175, 176, 177, 178, 179,
    180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194,
    195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209,
    210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224,
    225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254,
    255,
};

/* The byte of a char of the alphabet, -1 for any other char. */
static int char_byte(uint32_t cp)
{
	if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) ||
	    (cp >= 174 && cp <= 255))
		return (int)cp;
	if (cp >= 256 && cp <= 323) {
		uint32_t k = cp - 256; /* k-th byte outside the printable set */
		if (k <= 32)
			return (int)k;
		if (k <= 32 + 34)
			return (int)(127 + (k - 33));
		return 173;
	}
	return -1;
}

size_t tok_bytelevel_encode(const char *s, size_t n, char *out)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += (size_t)tok_utf8_put(tok_byte_char[(unsigned char)s[i]],
					  out + k);
	return k;
}

int tok_bytelevel_decode(const unsigned char *s, size_t n, char *out,
			 size_t *len)
{
	size_t k = 0, i = 0;

	while (i < n) {
		uint32_t cp;
		int b;
		i += (size_t)tok_utf8_next(s + i, n - i, &cp);
		b = char_byte(cp);
		if (b < 0)
			return 0;
		out[k++] = (char)b;
	}
	*len = k;
	return 1;
}
