/* lookup.c: the public lookups of a loaded tokenizer: token strings and
 * ids (added tokens first, then the model vocab), the vocab size, special
 * tokens. */
#include <string.h>

#include "tokenizer_internal.h"

int32_t taco_tok_token_to_id(const taco_tok *tok, const char *token, size_t len)
{
	for (int i = 0; i < tok->n_added; i++)
		if (tok->added[i].len == len &&
		    !memcmp(tok->added[i].content, token, len))
			return tok->added[i].id;
	return tok_vocab_find(&tok->vocab, token, len);
}

const char *taco_tok_id_to_token(const taco_tok *tok, int32_t id, size_t *len)
{
	int32_t a = tok_added_id_index(tok, id);

	if (a >= 0) {
		/* tokenizers gives the normalized form of normalized tokens */
		*len = tok->added[a].match_len;
		return tok->added[a].match;
	}
	if (id < 0 || (uint32_t)id >= tok->vocab.n_ids ||
	    tok->vocab.off[id] == TOK_NONE)
		return NULL;
	*len = tok->vocab.len[id];
	return tok->vocab.pool + tok->vocab.off[id];
}

int taco_tok_added_count(const taco_tok *tok)
{
	return tok->n_added;
}

const char *taco_tok_added_token(const taco_tok *tok, int i, size_t *len,
				 int *special)
{
	if (i < 0 || i >= tok->n_added)
		return NULL;
	*len = tok->added[i].len;
	*special = tok->added[i].special;
	return tok->added[i].content;
}

int32_t taco_tok_vocab_size(const taco_tok *tok)
{
	return tok->vocab_size;
}

int taco_tok_is_special(const taco_tok *tok, int32_t id)
{
	int32_t a = tok_added_id_index(tok, id);
	return a >= 0 && tok->added[a].special;
}

taco_tok_special taco_tok_special_ids(const taco_tok *tok)
{
	return tok->special;
}
