/* model_stream.c: weights in host memory, streamed layer by layer.
 *
 * With taco_step_opts.stream_layers the last layers' matrices live in host
 * memory (t->host, pinned on CUDA) and reach the device through a ring of
 * TACO_RING_SLOTS layer slots. Layer l always takes slot (l - first) % 3,
 * so consecutive layers take consecutive slots in forward and in backward.
 * Forward fetches layer l + 1 on the copy stream while layer l computes;
 * backward does the same downwards, and the last three layers of forward
 * are still in their slots when backward starts. A layer's updates (the
 * sink, possibly on the side stream) change its slot; the slot is written
 * back to the host copy just before it is refilled (two layers later in
 * backward: by then the side stream has long finished the updates, which
 * the main stream still waits for through their ticket, so that the copy,
 * ordered after the main stream, reads the updated weights); the last
 * slots after the last layer, and the step's end waits for the copies
 * (taco_model_step: its read of the loss then synchronises). Copies on the copy
 * stream run in issue order: a slot's write-back completes before its
 * refill. The CPU backend copies at once, so it runs the same schedule
 * with the same buffers and counters. */
#include <string.h>

#include "step.h"

#define RING_ALIGN 256

static size_t tensor_bytes(const taco_tensor *t)
{
	return t->numel * tk_dtype_size(t->dtype);
}

int taco_stream_first(const taco_model *m)
{
	int L = m->cfg.layers, s = m->sched.stream_layers;

	if (s < 0)
		s = 0;
	return s > L ? 0 : L - s;
}

int taco_tensor_wants_host(const taco_model *m, const taco_tensor *t)
{
	return t->ndim == 2 && t->layer >= 0 &&
	       t->layer >= taco_stream_first(m);
}

int taco_stream_count(const taco_model *m)
{
	return TACO_L_COUNT + (m->expert ? m->cfg.experts * TACO_X_COUNT : 0);
}

int taco_stream_tensor(const taco_model *m, int l, int si)
{
	if (si < TACO_L_COUNT)
		return m->layer[l][si];
	return m->expert[(size_t)l * m->cfg.experts * TACO_X_COUNT +
			 (size_t)(si - TACO_L_COUNT)];
}

size_t taco_ring_layout(const taco_model *m, int stream, size_t *off)
{
	int L = m->cfg.layers, ns = taco_stream_count(m);
	size_t at = 0;

	for (int sl = 0; sl < ns; sl++) {
		size_t most = 0;
		for (int l = L - stream; stream > 0 && l < L; l++) {
			int id = taco_stream_tensor(m, l, sl);
			if (id >= 0 && m->tensors[id].ndim == 2 &&
			    tensor_bytes(&m->tensors[id]) > most)
				most = tensor_bytes(&m->tensors[id]);
		}
		off[sl] = at;
		at += (most + RING_ALIGN - 1) / RING_ALIGN * RING_ALIGN;
	}
	return at;
}

static size_t ralign(size_t b)
{
	return (b + RING_ALIGN - 1) / RING_ALIGN * RING_ALIGN;
}

void taco_wb_layout(const taco_model *m, int stream, size_t *voff, size_t *ioff,
		    size_t *slot, size_t *layer)
{
	int L = m->cfg.layers, ns = taco_stream_count(m);
	size_t v = 0, i = 0;

	for (int sl = 0; sl < ns; sl++) {
		size_t vb = 0, ib = 0;
		for (int l = L - stream; stream > 0 && l < L; l++) {
			int id = taco_stream_tensor(m, l, sl);
			const taco_tensor *t;
			size_t n;
			if (id < 0 || (t = &m->tensors[id])->ndim != 2)
				continue;
			n = (size_t)t->shape[1] * TACO_MAX_SLOTS;
			if (n * tk_dtype_size(t->dtype) > vb)
				vb = n * tk_dtype_size(t->dtype);
			if (n * (t->shape[0] <= 65535 ? 2 : 4) > ib)
				ib = n * (t->shape[0] <= 65535 ? 2 : 4);
		}
		voff[sl] = v;
		ioff[sl] = i;
		v += ralign(vb);
		i += ralign(ib);
	}
	*slot = v;
	*layer = v + i;
}

/* One tensor to host memory (to_host) or back to the device. */
static int move_one(taco_model *m, taco_tensor *t, int to_host)
{
	size_t bytes = tensor_bytes(t);
	void *p = to_host ? m->ops->host_alloc(bytes) : m->ops->alloc(bytes);

	if (!p)
		return -ENOMEM;
	if (to_host) {
		m->ops->download(p, t->data, bytes);
		m->ops->free(t->data, bytes);
		t->host = p;
		t->data = NULL;
	} else {
		m->ops->upload(p, t->host, bytes);
		m->ops->host_free(t->host, bytes);
		t->data = p;
		t->host = NULL;
	}
	return 0;
}

int taco_model_move_weights(taco_model *m, int stream_layers, taco_err *err)
{
	int old = m->sched.stream_layers, r = 0, i;

	if (!m->ops)
		return 0;
	m->sched.stream_layers = stream_layers;
	for (i = 0; i < m->n_tensors && !r; i++) {
		taco_tensor *t = &m->tensors[i];
		int want = taco_tensor_wants_host(m, t);
		/* not allocated yet: taco_model_alloc_tensor places it */
		if ((t->data || t->host) && want != (t->host != NULL))
			r = move_one(m, t, want);
	}
	if (!r)
		return 0;
	/* Put back what moved: it freed the memory the way back needs. */
	m->sched.stream_layers = old;
	while (i-- > 0) {
		taco_tensor *t = &m->tensors[i];
		int want = taco_tensor_wants_host(m, t);
		if ((t->data || t->host) && want != (t->host != NULL))
			(void)move_one(m, t, want);
	}
	return taco_err_set(err, -ENOMEM,
			    "cannot move the weights of the last %d layers "
			    "(%s memory)",
			    stream_layers,
			    stream_layers > old ? "host" : "device");
}

void taco_tensor_read(const taco_model *m, int id, void *host_dst)
{
	const taco_tensor *t = &m->tensors[id];

	if (t->host)
		memcpy(host_dst, t->host, tensor_bytes(t));
	else
		m->ops->download(host_dst, t->data, tensor_bytes(t));
}

void taco_tensor_write(const taco_model *m, int id, size_t offset,
		       const void *src, size_t bytes)
{
	const taco_tensor *t = &m->tensors[id];

	if (t->host)
		memcpy((char *)t->host + offset, src, bytes);
	else
		m->ops->upload((char *)t->data + offset, src, bytes);
}

/* Streaming state of the step. */

static int streamed(const step_ctx *c, int l)
{
	return c->w->s.stream && l >= c->m->cfg.layers - c->w->s.stream &&
	       l < c->m->cfg.layers;
}

static int slot_of(const step_ctx *c, int l)
{
	return (l - (c->m->cfg.layers - c->w->s.stream)) % c->w->s.slots;
}

/* Points layer l's streamed tensors at slot s (on 0: at nothing). */
static void map_layer(step_ctx *c, int l, int s, int on)
{
	taco_work *w = c->w;
	int ns = taco_stream_count(c->m);

	for (int sl = 0; sl < ns; sl++) {
		int id = taco_stream_tensor(c->m, l, sl);
		taco_tensor *t;
		if (id < 0 || !(t = &c->m->tensors[id])->host)
			continue;
		t->data = on ? (char *)w->ring + (size_t)s * w->slot_bytes +
				   w->ring_off[sl]
			     : NULL;
	}
}

/* Writes slot s back to the host copy once its updates are done: the
 * entries at each TACO tensor's slot rows, gathered into the slot's part
 * of wb_dev and copied with the rows to the layer's part of wb_host (the
 * scatter into the host copy waits for the step's end), or the whole
 * tensor. wb_dev's part was last read by the copies of this slot's
 * previous write-back, issued before the layer now computing waited for
 * the copy stream (flush runs after that wait). */
static void flush(step_ctx *c, int s)
{
	taco_work *w = c->w;
	int l = w->slot_layer[s], li = l - (c->m->cfg.layers - w->s.stream);
	int ns = taco_stream_count(c->m);
	char *dev, *host;

	/* (a slot of generation's is never dirty: it has no write-back) */
	if (!w->slot_dirty[s])
		return;
	dev = (char *)w->wb_dev + (size_t)s * w->wb_slot;
	host = (char *)w->wb_host + (size_t)li * w->wb_layer;
	if (w->slot_ticket[s])
		c->o->side_wait(w->slot_ticket[s]);
	for (int sl = 0; sl < ns; sl++) {
		int id = taco_stream_tensor(c->m, l, sl), k = 0;
		const void *rows = NULL;
		taco_tensor *t;
		size_t n;
		if (id < 0 || !(t = &c->m->tensors[id])->host)
			continue;
		if (c->sink->skip && c->sink->skip[id])
			continue; /* frozen: unchanged */
		if (c->sink->changed_rows)
			rows =
			    c->sink->changed_rows(c->sink->ctx, c->m, id, &k);
		if (!rows || k < 1 || k > TACO_MAX_SLOTS) {
			c->o->copy_async(t->host, t->data, tensor_bytes(t), 1);
			continue;
		}
		n = (size_t)t->shape[1] * (size_t)k;
		c->o->taco_gather(dev + w->wb_voff[sl], t->data, t->dtype, rows,
				  (int)t->shape[0], (int)t->shape[1], k);
		c->o->copy_async(host + w->wb_voff[sl], dev + w->wb_voff[sl],
				 n * tk_dtype_size(t->dtype), 1);
		c->o->copy_async(host + w->wb_slot + w->wb_ioff[sl], rows,
				 n * (t->shape[0] <= 65535 ? 2 : 4), 1);
		w->wb_k[(size_t)li * ns + sl] = k;
	}
	w->slot_dirty[s] = 0;
}

/* Issues the copy of layer l into its slot (nothing when it is there). */
static void fetch(step_ctx *c, int l)
{
	taco_work *w = c->w;
	int s = slot_of(c, l), ns = taco_stream_count(c->m);

	if (w->slot_layer[s] == l)
		return;
	flush(c, s);
	if (w->slot_layer[s] >= 0)
		map_layer(c, w->slot_layer[s], s, 0);
	map_layer(c, l, s, 1);
	w->slot_layer[s] = l;
	for (int sl = 0; sl < ns; sl++) {
		int id = taco_stream_tensor(c->m, l, sl);
		taco_tensor *t;
		if (id < 0 || !(t = &c->m->tensors[id])->host)
			continue;
		c->o->copy_async(t->data, t->host, tensor_bytes(t), 0);
	}
}

void stream_begin(step_ctx *c)
{
	taco_work *w = c->w;

	for (int s = 0; s < TACO_RING_SLOTS; s++) {
		w->slot_layer[s] = -1;
		w->slot_dirty[s] = 0;
		w->slot_ticket[s] = 0;
	}
}

int stream_active(const step_ctx *c)
{
	return c->w->s.stream > 0;
}

void stream_ready(step_ctx *c, int l)
{
	if (!streamed(c, l) || c->w->slot_layer[slot_of(c, l)] == l)
		return;
	fetch(c, l);
	c->o->copy_wait();
}

void stream_prefetch(step_ctx *c, int l)
{
	if (streamed(c, l))
		fetch(c, l);
}

void stream_updated(step_ctx *c, int l)
{
	taco_work *w = c->w;
	int s;

	if (!streamed(c, l) || !c->sink)
		return;
	s = slot_of(c, l);
	w->slot_dirty[s] = 1;
	w->slot_ticket[s] =
	    c->gticket[0] > c->gticket[1] ? c->gticket[0] : c->gticket[1];
}

void stream_scatter(step_ctx *c)
{
	taco_work *w = c->w;
	int first = c->m->cfg.layers - w->s.stream;
	int ns = taco_stream_count(c->m);

	for (int li = 0; li < w->s.stream; li++) {
		const char *host =
		    (const char *)w->wb_host + (size_t)li * w->wb_layer;
		for (int sl = 0; sl < ns; sl++) {
			int k = w->wb_k[(size_t)li * ns + sl];
			int id = taco_stream_tensor(c->m, first + li, sl);
			const taco_tensor *t;
			size_t C, es, n;
			if (!k)
				continue;
			w->wb_k[(size_t)li * ns + sl] = 0;
			t = &c->m->tensors[id];
			C = (size_t)t->shape[1];
			es = tk_dtype_size(t->dtype);
			n = C * (size_t)k;
			for (size_t i = 0; i < n; i++) {
				const char *rows =
				    host + w->wb_slot + w->wb_ioff[sl];
				uint32_t r = t->shape[0] <= 65535
						 ? ((const uint16_t *)rows)[i]
						 : ((const uint32_t *)rows)[i];
				if (r >= (uint64_t)t->shape[0])
					continue; /* empty slot */
				memcpy((char *)t->host +
					   ((size_t)r * C + i / (size_t)k) * es,
				       host + w->wb_voff[sl] + i * es, es);
			}
		}
	}
}

void stream_end(step_ctx *c)
{
	taco_work *w = c->w;

	if (!stream_active(c))
		return;
	for (int s = 0; s < w->s.slots; s++)
		flush(c, s);
	for (int s = 0; s < w->s.slots; s++)
		if (w->slot_layer[s] >= 0) {
			map_layer(c, w->slot_layer[s], s, 0);
			w->slot_layer[s] = -1;
		}
}
