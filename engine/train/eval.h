/* eval.h: scoring a multiple-choice set (data/mc.h) with a model. */
#ifndef TACO_EVAL_H
#define TACO_EVAL_H

#include "data/mc.h"
#include "model/model.h"
#include "util/taco_err.h"

/* Scores every candidate in batches of B rows of T tokens (rows longer
 * than T lose prompt tokens from the left) and returns the accuracy, and
 * when row_scores is set (n_rows entries) each candidate's log-likelihood. */
int taco_mc_eval(taco_model *m, const taco_mc_set *s, int B, int T,
		 double *accuracy, double *row_scores, taco_err *err);

#endif
