/* pref.h: what a DPO run adds to the training loop (internal to
 * engine/train): the reference log-probabilities, computed once from the
 * starting weights and kept in the output directory, and the pairs'
 * metrics. */
#ifndef TACO_TRAIN_PREF_H
#define TACO_TRAIN_PREF_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data.h"
#include "events.h"
#include "model/model.h"
#include "util/taco_err.h"

#define TACO_PREF_REF_FILE "reference_logps.json"

typedef struct taco_pref_ref {
	double *train, *val;   /* [2 * pairs]: chosen, rejected */
	size_t n_train, n_val; /* pairs */
	char digest[17];       /* of the data the values belong to */
} taco_pref_ref;

/* How the reference pass reports itself: "reference" events on ev, a line
 * on stderr with progress, and a time estimate of the whole job in its
 * events, from the pass's own pace and the train_batches micro-batches of
 * training that follow it. */
typedef struct taco_pref_pass {
	taco_events *ev;
	int progress;
	int64_t train_batches;
} taco_pref_pass;

/* The reference log-probabilities of every training and validation pair:
 * read from output_dir/TACO_PREF_REF_FILE when it belongs to this data,
 * seq_len and precision, else (unless must_exist: a resumed run, whose
 * weights are no longer the starting ones) computed by one forward pass
 * of m over the pairs, P pairs a batch (the training batch's shape, so
 * that the first step's log-probabilities are these, bit for bit), and
 * written atomically. Emits "reference" progress events. */
int taco_pref_ref_ensure(taco_model *m, const taco_data *train,
			 const taco_data *val, int P, int T,
			 const char *output_dir, int must_exist,
			 const taco_pref_pass *pass, taco_pref_ref *out,
			 taco_err *err);
void taco_pref_ref_free(taco_pref_ref *r);

/* The metrics of pairs, summed. */
typedef struct taco_pref_sums {
	int64_t pairs, correct;
	double loss, reward_c, reward_r, logp_c, logp_r;
} taco_pref_sums;

/* Adds n pairs' rows: logp and ref [2n]. */
void taco_pref_sums_add(taco_pref_sums *s, double beta, const double *logp,
			const double *ref, int n);
/* Adds the means to o, named as TRL names them ("rewards/chosen", ...)
 * after prefix (a validation's "val_"), and "<prefix>loss" when loss. */
void taco_pref_sums_json(const taco_pref_sums *s, const char *prefix, int loss,
			 json_t *o);

#endif
