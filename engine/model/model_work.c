/* model_work.c: allocation of the step buffers. */
#include <stdlib.h>
#include <string.h>

#include "mem_terms.h"
#include "model_work.h"

/* Every buffer of struct taco_work with its element count and size, so that
 * allocation and release walk one list. */
typedef struct work_buf {
	void **slot;
	size_t elems;
	size_t esize;
	int term; /* enum taco_plan_term */
} work_buf;

/* fixed buffers + per-layer activation sets */
#define WB_FIXED (32 + TACO_L_COUNT)
#define WB_PER_SET 17

static size_t work_list_cap(int n_acts)
{
	return WB_FIXED + (size_t)WB_PER_SET * (size_t)n_acts;
}

static int work_list(const taco_model *m, taco_work *w, int B, int T,
		     work_buf *list)
{
	const taco_config *c = &m->cfg;
	size_t N = (size_t)B * T, H = c->hidden, I = c->intermediate;
	size_t D = (size_t)c->heads * c->head_dim;
	size_t Dkv = (size_t)c->kv_heads * c->head_dim;
	size_t V = c->vocab, L = c->layers, half = c->head_dim / 2;
	size_t C = (size_t)taco_work_chunk_rows(m, B * T), glayer = H;
	int n = 0, q = c->qk_norm;
	const taco_tensor *head = &m->tensors[m->lm_head];

#define ADD(field, count, term)                                                \
	list[n++] = (work_buf){(void **)&w->field, (count), sizeof(*w->field), \
			       TACO_PLAN_##term}
	ADD(tokens, N, BATCH);
	ADD(targets, N, BATCH);
	ADD(pos, N, BATCH);
	ADD(rope_cos, (size_t)T * half, BATCH);
	ADD(rope_sin, (size_t)T * half, BATCH);
	ADD(xs, (L + 1) * N * H, LAYER_INPUTS);
	for (int a = 0; a < w->n_acts; a++) {
		taco_layer_acts *x = &w->acts[a];
#define ADDA(field, count, term)                                               \
	list[n++] = (work_buf){(void **)&x->field, (count), sizeof(*x->field), \
			       w->n_acts > 1 ? TACO_PLAN_LAYER_INPUTS          \
					     : TACO_PLAN_##term}
		ADDA(ln1, N * H, LAYER_WORK);
		ADDA(rstd1, N, LAYER_WORK);
		ADDA(q, N * D, LAYER_WORK);
		ADDA(k, N * Dkv, LAYER_WORK);
		ADDA(v, N * Dkv, LAYER_WORK);
		ADDA(q_pre, q ? N * D : 0, LAYER_WORK);
		ADDA(k_pre, q ? N * Dkv : 0, LAYER_WORK);
		ADDA(rstd_q, q ? N * c->heads : 0, LAYER_WORK);
		ADDA(rstd_k, q ? N * c->kv_heads : 0, LAYER_WORK);
		ADDA(att, N * D, LAYER_WORK);
		ADDA(lse, N * c->heads, ATTENTION);
		ADDA(x_mid, N * H, LAYER_WORK);
		ADDA(ln2, N * H, LAYER_WORK);
		ADDA(rstd2, N, LAYER_WORK);
		ADDA(gate, N * I, LAYER_WORK);
		ADDA(up, N * I, LAYER_WORK);
		ADDA(act, N * I, LAYER_WORK);
#undef ADDA
	}
	ADD(dx, N * H, LAYER_WORK);
	ADD(dtmp, N * H, LAYER_WORK);
	ADD(dq, N * D, LAYER_WORK);
	ADD(dk, N * Dkv, LAYER_WORK);
	ADD(dv, N * Dkv, LAYER_WORK);
	ADD(dq2, q ? N * D : 0, LAYER_WORK);
	ADD(dk2, q ? N * Dkv : 0, LAYER_WORK);
	ADD(datt, N * D, LAYER_WORK);
	ADD(dgate, N * I, LAYER_WORK);
	ADD(dup, N * I, LAYER_WORK);
	ADD(dact, N * I, LAYER_WORK);
	ADD(hf, N * H, LOSS_CHUNK);
	ADD(rstd_f, N, LOSS_CHUNK);
	ADD(logits, C * V, LOSS_CHUNK);
	for (int s = 0; s < TACO_L_COUNT; s++) {
		int id = m->layer[0][s], conv = 0;
		size_t e = id >= 0 ? m->tensors[id].numel : 0;
		if (e > glayer)
			glayer = e;
		/* Checkpoints may mix dtypes across layers. */
		for (size_t l = 0; l < L && id >= 0; l++)
			conv |= m->tensors[m->layer[l][s]].dtype != TK_F32;
		ADD(wl[s], conv ? e : 0, WEIGHT_SCRATCH);
	}
	ADD(w_head, head->dtype == TK_F32 ? 0 : V * H, WEIGHT_SCRATCH);
	ADD(w_final, m->tensors[m->final_norm].dtype == TK_F32 ? 0 : H,
	    WEIGHT_SCRATCH);
	ADD(g_layer, glayer, GRAD_BUFFER);
	ADD(g_head, V * H, HEAD_GRAD);
#undef ADD
	return n;
}

int taco_work_plan(const taco_model *m, int B, int T, uint64_t *term)
{
	taco_work w;
	work_buf *list;
	int n;

	memset(&w, 0, sizeof(w));
	w.n_acts = taco_work_act_sets(m);
	w.acts = calloc((size_t)w.n_acts, sizeof(*w.acts));
	list = calloc(work_list_cap(w.n_acts), sizeof(*list));
	if (!w.acts || !list) {
		free(w.acts);
		free(list);
		return -ENOMEM;
	}
	n = work_list(m, &w, B, T, list);
	for (int i = 0; i < n; i++)
		term[list[i].term] += list[i].elems * list[i].esize;
	free(w.acts);
	free(list);
	return 0;
}

int taco_work_chunk_rows(const taco_model *m, int N)
{
	size_t elems =
	    m->ce_chunk_elems ? m->ce_chunk_elems : TACO_CE_CHUNK_ELEMS;
	size_t C = elems / (size_t)m->cfg.vocab;

	return C < 1 ? 1 : (C > (size_t)N ? N : (int)C);
}

int taco_work_act_sets(const taco_model *m)
{
	return m->keep_activations ? m->cfg.layers : 1;
}

static void work_free(taco_model *m, taco_work *w)
{
	work_buf *list = calloc(work_list_cap(w->n_acts), sizeof(*list));
	int n;

	if (list) { /* without the list the buffers leak, never corrupt */
		n = work_list(m, w, w->B, w->T, list);
		for (int i = 0; i < n; i++)
			if (*list[i].slot)
				m->ops->free(*list[i].slot,
					     list[i].elems * list[i].esize);
	}
	free(list);
	free(w->acts);
	free(w);
}

void taco_model_release_work(taco_model *m)
{
	if (m && m->work) {
		work_free(m, m->work);
		m->work = NULL;
	}
}

int taco_work_ensure(taco_model *m, int B, int T, taco_err *err)
{
	work_buf *list;
	taco_work *w;
	int n, sets = taco_work_act_sets(m);

	if (m->work && m->work->B == B && m->work->T == T &&
	    m->work->C == taco_work_chunk_rows(m, B * T) &&
	    m->work->n_acts == sets)
		return 0;
	taco_model_release_work(m);
	w = calloc(1, sizeof(*w));
	list = calloc(work_list_cap(sets), sizeof(*list));
	if (w)
		w->acts = calloc((size_t)sets, sizeof(*w->acts));
	if (!w || !list || !w->acts) {
		if (w)
			free(w->acts);
		free(w);
		free(list);
		return taco_err_set(err, -ENOMEM, "out of memory");
	}
	w->B = B;
	w->T = T;
	w->C = taco_work_chunk_rows(m, B * T);
	w->n_acts = sets;
	n = work_list(m, w, B, T, list);
	for (int i = 0; i < n; i++) {
		size_t bytes = list[i].elems * list[i].esize;
		if (!bytes)
			continue;
		*list[i].slot = m->ops->alloc(bytes);
		if (!*list[i].slot) {
			free(list);
			work_free(m, w);
			return taco_err_set(err, -ENOMEM,
					    "cannot allocate %zu bytes of step "
					    "buffers for batch %d x %d",
					    bytes, B, T);
		}
		w->bytes += bytes;
	}
	free(list);
	m->work = w;
	return 0;
}
