#include "job_data.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "model/config.h"

static void opts_of(const taco_job *job, taco_dataset_opts *o)
{
	taco_dataset_defaults(o);
	o->model_dir = job->model;
	o->template_id = job->chat_template;
	o->chat_jinja = job->chat_template_jinja;
	o->chat_kwargs = job->chat_template_kwargs;
	/* once for every file of the job: the same clock renders them */
	o->chat_now = job->chat_template_time ? job->chat_template_time
					      : (int64_t)time(NULL);
	o->train_on_all = job->train_on_all;
	o->seq_len = job->seq_len;
	o->overlength = job->overlength;
	o->max_examples = job->max_examples;
	o->method = job->method;
}

int taco_job_data_load(const taco_job *job, int vocab, taco_job_data *out,
		       taco_err *err)
{
	taco_dataset_opts o;
	int r;

	memset(out, 0, sizeof(*out));
	if (!taco_tok_dir_has_tokenizer(job->model)) {
		if (job->eval_multiple_choice[0])
			return taco_err_set(err, -EINVAL,
					    "eval_multiple_choice: the model "
					    "has no tokenizer (tokenizer.json, "
					    "or vocab.json and merges.txt) to "
					    "encode it with");
		/* pre-tokenized lines are examples, not pairs */
		if (job->method == TACO_METHOD_DPO)
			return taco_err_set(err, -EINVAL,
					    "method dpo: the model has no "
					    "tokenizer (tokenizer.json, or "
					    "vocab.json and merges.txt) to "
					    "render preference pairs with");
		if ((r = taco_data_load_pretok(job->train, vocab,
					       job->max_examples, &out->train,
					       err)))
			return r;
		if (job->validation[0] &&
		    (r = taco_data_load_pretok(job->validation, vocab,
					       job->max_examples, &out->val,
					       err)))
			return r;
		return 0;
	}
	if ((r = taco_tok_load(job->model, &out->tok, err)))
		return r;
	if (taco_tok_vocab_size(out->tok) > vocab)
		return taco_err_set(err, -EINVAL,
				    "%s: the tokenizer has %d tokens, the "
				    "model's embedding only %d rows",
				    job->model, taco_tok_vocab_size(out->tok),
				    vocab);
	opts_of(job, &o);
	out->have_reports = 1;
	if ((r = taco_dataset_load(job->train, out->tok, &o, &out->train,
				   &out->train_report, err)))
		return r;
	/* the validation chats' first prompts, for evaluation's answers
	 * (supervised jobs: a DPO line is a pair) */
	o.keep_prompts = job->method == TACO_METHOD_DPO ? 0 : job->eval_samples;
	if (job->validation[0] &&
	    (r = taco_dataset_load(job->validation, out->tok, &o, &out->val,
				   &out->val_report, err)))
		return r;
	if (job->eval_multiple_choice[0]) {
		taco_chat_opts co = {o.model_dir, o.template_id, o.chat_jinja,
				     o.chat_kwargs, o.chat_now};
		taco_chat *chat = NULL;
		/* chat lines need the template; a model without one may still
		 * score plain prompts */
		if (taco_chat_open(&co, out->tok, &chat, NULL))
			chat = NULL;
		r = taco_mc_load(job->eval_multiple_choice, out->tok, chat,
				 job->max_examples, &out->mc, err);
		taco_chat_free(chat);
		if (r)
			return r;
	}
	return 0;
}

int taco_job_data_check(const taco_job *job, taco_job_data *out, taco_err *err)
{
	char path[TACO_PATH_MAX + 16];
	taco_config cfg;
	int r;

	memset(out, 0, sizeof(*out));
	snprintf(path, sizeof(path), "%s/config.json", job->model);
	if ((r = taco_config_load(path, &cfg, err)))
		return r;
	return taco_job_data_load(job, cfg.vocab, out, err);
}

void taco_job_data_free(taco_job_data *d)
{
	taco_tok_free(d->tok);
	taco_data_free(d->train);
	taco_data_free(d->val);
	taco_mc_free(d->mc);
	memset(d, 0, sizeof(*d));
}
