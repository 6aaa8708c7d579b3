/* test_job.c: JOB.json validation and learning-rate schedules. */
#include <check.h>

#include "testutil.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/job.h"
#include "job/job_schema.h"

static int parse(const char *json, taco_job *job, taco_job_problems *p)
{
	return taco_job_parse(json, strlen(json), "/jobs", job, p);
}

static int has(const taco_job_problems *p, const char *fragment)
{
	for (int i = 0; i < p->n && i < 64; i++)
		if (strstr(p->msg[i], fragment))
			return 1;
	return 0;
}

START_TEST(test_full_job)
{
	const char *j =
	    "{\"model\":\"m\",\"train\":\"/d/t.jsonl\",\"validation\":"
	    "\"v.jsonl\",\"output_dir\":\"out\",\"steps\":300,"
	    "\"batch_size\":2,\"seq_len\":128,\"grad_accum\":4,\"lr\":2e-4,"
	    "\"schedule\":\"cosine\",\"warmup_steps\":10,\"min_lr_ratio\":"
	    "0.1,\"optimizer\":\"taco\",\"taco\":{\"k\":4,\"beta\":0.5,"
	    "\"weight_decay\":0.01,\"rounding\":\"nearest\"},\"adamw\":{"
	    "\"beta1\":0.8,\"beta2\":0.99,\"eps\":1e-6,\"weight_decay\":0.1}"
	    ",\"freeze\":[\"model.embed_tokens\"],\"seed\":7,\"eval_every\":"
	    "50,\"checkpoint_every\":100,\"keep_checkpoints\":3,"
	    "\"export_shard_bytes\":1048576,\"log_every\":5}";
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(parse(j, &job, &p), 0);
	ck_assert_str_eq(job.model, "/jobs/m");
	ck_assert_str_eq(job.train, "/d/t.jsonl");
	ck_assert_str_eq(job.validation, "/jobs/v.jsonl");
	ck_assert_int_eq(job.steps, 300);
	ck_assert_int_eq(job.grad_accum, 4);
	ck_assert_int_eq(job.schedule, TACO_SCHED_COSINE);
	ck_assert_int_eq(job.optim.k, 4);
	ck_assert_int_eq(job.optim.stochastic, 0);
	ck_assert_float_eq(job.optim.adam_eps, 1e-6f);
	ck_assert_int_eq(job.n_freeze, 1);
	ck_assert_str_eq(job.freeze[0], "model.embed_tokens");
	ck_assert_uint_eq(job.optim.seed, 7);
	ck_assert_int_eq(job.keep_checkpoints, 3);
	taco_job_free(&job);
}
END_TEST

START_TEST(test_defaults)
{
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1}",
			       &job, &p),
			 0);
	ck_assert_int_eq(job.batch_size, 4);
	ck_assert_int_eq(job.seq_len, 1024);
	ck_assert_int_eq(job.grad_accum, 1);
	ck_assert_int_eq(job.optim.k, 16);
	ck_assert_float_eq(job.optim.beta, 0.9f);
	ck_assert_int_eq(job.optim.stochastic, 1);
	ck_assert_int_eq(job.optim.all_adamw, 0);
	ck_assert_int_eq(job.schedule, TACO_SCHED_LINEAR);
	taco_job_free(&job);
}
END_TEST

/* Every problem is reported at once, each naming its option. */
START_TEST(test_all_problems_together)
{
	taco_job job;
	taco_job_problems p;
	int r = parse("{\"train\":3,\"output_dir\":\"o\",\"stepz\":5,"
		      "\"batch_size\":0,\"lr\":-1,\"schedule\":\"exp\","
		      "\"taco\":{\"k\":17,\"color\":1},\"freeze\":\"x\","
		      "\"seq_len\":2.5}",
		      &job, &p);

	ck_assert_int_eq(r, -EINVAL);
	ck_assert(has(&p, "stepz: unknown option"));
	ck_assert(has(&p, "model: required"));
	ck_assert(has(&p, "train: must be a non-empty string"));
	ck_assert(has(&p, "steps: set steps or epochs"));
	ck_assert(has(&p, "batch_size: must be an integer"));
	ck_assert(has(&p, "lr: must be \"auto\" or a number"));
	ck_assert(has(&p, "schedule: must be one of constant, linear, cosine"));
	ck_assert(has(&p, "taco.k: must be an integer in [1, 16]"));
	ck_assert(has(&p, "taco.color: unknown option"));
	ck_assert(has(&p, "freeze: must be an array"));
	ck_assert(has(&p, "seq_len: must be an integer"));
	ck_assert_int_eq(p.n, 11);
	taco_job_free(&job);
}
END_TEST

/* method: sft by default, or dpo with dpo.beta in (0, 100] (0.1 when
 * absent); dpo packs nothing, and dpo is only for method dpo. */
START_TEST(test_method)
{
	static const struct {
		const char *opts, *problem; /* NULL: accepted */
	} bad[] = {
	    {"\"method\":\"ppo\"", "method: must be one of sft, dpo"},
	    {"\"method\":1", "method: must be one of sft, dpo"},
	    {"\"method\":\"dpo\",\"dpo\":{\"beta\":0}",
	     "dpo.beta: must be a number in (0, 100]"},
	    {"\"method\":\"dpo\",\"dpo\":{\"beta\":-1}",
	     "dpo.beta: must be a number in (0, 100]"},
	    {"\"method\":\"dpo\",\"dpo\":{\"beta\":100.5}",
	     "dpo.beta: must be a number in (0, 100]"},
	    {"\"method\":\"dpo\",\"dpo\":{\"beta\":\"auto\"}",
	     "dpo.beta: must be a number"},
	    {"\"method\":\"dpo\",\"dpo\":{\"gamma\":1}",
	     "dpo.gamma: unknown option"},
	    {"\"method\":\"dpo\",\"dpo\":0.1", "dpo: must be an object"},
	    {"\"method\":\"dpo\",\"packing\":true",
	     "packing: not with method dpo"},
	    {"\"dpo\":{\"beta\":0.5}", "dpo: only with method dpo"},
	    {"\"method\":\"sft\",\"dpo\":{\"beta\":0.5}",
	     "dpo: only with method dpo"},
	};
	char text[512];
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1}",
			       &job, &p),
			 0);
	ck_assert_int_eq(job.method, TACO_METHOD_SFT);
	ck_assert(job.dpo_beta == TACO_DPO_BETA_DEFAULT);
	taco_job_free(&job);
	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1,"
			       "\"method\":\"dpo\"}",
			       &job, &p),
			 0);
	ck_assert_int_eq(job.method, TACO_METHOD_DPO);
	ck_assert(job.dpo_beta == TACO_DPO_BETA_DEFAULT);
	taco_job_free(&job);
	/* the limits: 100 is in, the smallest positive too */
	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1,"
			       "\"method\":\"dpo\",\"dpo\":{\"beta\":100}}",
			       &job, &p),
			 0);
	ck_assert(job.dpo_beta == 100);
	taco_job_free(&job);
	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1,"
			       "\"method\":\"dpo\",\"dpo\":{\"beta\":1e-300},"
			       "\"packing\":false}",
			       &job, &p),
			 0);
	ck_assert(job.dpo_beta == 1e-300);
	taco_job_free(&job);
	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1,"
			       "\"method\":\"sft\",\"packing\":true}",
			       &job, &p),
			 0);
	ck_assert_int_eq(job.method, TACO_METHOD_SFT);
	taco_job_free(&job);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text),
			 "{\"model\":\"m\",\"train\":\"t\",\"output_dir\":"
			 "\"o\",\"epochs\":1,%s}",
			 bad[i].opts);
		ck_assert_msg(parse(text, &job, &p) == -EINVAL, "%s accepted",
			      bad[i].opts);
		ck_assert_msg(p.n == 1 && has(&p, bad[i].problem),
			      "%s: %d problems, the first '%s'", bad[i].opts,
			      p.n, p.msg[0]);
		taco_job_free(&job);
	}
	/* OpenAI's method maps onto them: a request's taco object sets
	 * neither */
	ck_assert_int_eq(taco_job_key_find("method")->setter,
			 TACO_JOB_BY_DAEMON);
	ck_assert_int_eq(taco_job_key_find("dpo")->setter, TACO_JOB_BY_DAEMON);
}
END_TEST

/* weights: the default auto; host only where the step can update the
 * streamed layers from its gradient pieces. */
START_TEST(test_weights)
{
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1}",
			       &job, &p),
			 0);
	ck_assert_int_eq(job.weights, TACO_WEIGHTS_AUTO);
	taco_job_free(&job);
	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1,"
			       "\"weights\":\"host\"}",
			       &job, &p),
			 0);
	ck_assert_int_eq(job.weights, TACO_WEIGHTS_HOST);
	taco_job_free(&job);
	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1,"
			       "\"weights\":\"host\",\"grad_accum\":2,"
			       "\"optimizer\":\"adamw\","
			       "\"activation_checkpointing\":false}",
			       &job, &p),
			 -EINVAL);
	ck_assert(has(&p, "weights: host needs grad_accum 1"));
	ck_assert(has(&p, "weights: host needs optimizer taco"));
	ck_assert(has(&p, "weights: host needs activation_checkpointing"));
	ck_assert_int_eq(p.n, 3);
	taco_job_free(&job);
	ck_assert_int_eq(parse("{\"model\":\"m\",\"train\":\"t\","
			       "\"output_dir\":\"o\",\"epochs\":1,"
			       "\"weights\":\"gpu\"}",
			       &job, &p),
			 -EINVAL);
	ck_assert(has(&p, "weights: must be one of auto, device, host"));
	taco_job_free(&job);
}
END_TEST

/* The chat template's options: the job's own Jinja (not beside a built-in),
 * its variables (not tacod's own), the clock. */
START_TEST(test_chat_template_options)
{
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(
	    parse("{\"model\":\"m\",\"train\":\"t\",\"output_dir\":\"o\","
		  "\"epochs\":1,\"chat_template_jinja\":\"{{ messages }}\","
		  "\"chat_template_kwargs\":{\"enable_thinking\":false, "
		  "\"d\": [1, 2.5]},\"chat_template_time\":1733500000}",
		  &job, &p),
	    0);
	ck_assert_str_eq(job.chat_template_jinja, "{{ messages }}");
	ck_assert_str_eq(job.chat_template_kwargs,
			 "{\"enable_thinking\":false,\"d\":[1,2.5]}");
	ck_assert_int_eq(job.chat_template_time, 1733500000);
	taco_job_free(&job);
	ck_assert_int_eq(
	    parse("{\"model\":\"m\",\"train\":\"t\",\"output_dir\":\"o\","
		  "\"epochs\":1,\"chat_template\":\"chatml\","
		  "\"chat_template_jinja\":\"x\",\"chat_template_kwargs\":"
		  "{\"messages\":[]},\"chat_template_time\":-1}",
		  &job, &p),
	    -EINVAL);
	ck_assert(has(&p, "chat_template_jinja: give it or chat_template"));
	ck_assert(has(&p, "chat_template_kwargs.messages: tacod sets it"));
	ck_assert(has(&p, "chat_template_time"));
	taco_job_free(&job);
	ck_assert_int_eq(
	    parse("{\"model\":\"m\",\"train\":\"t\",\"output_dir\":\"o\","
		  "\"epochs\":1,\"chat_template_jinja\":3,"
		  "\"chat_template_kwargs\":\"x\"}",
		  &job, &p),
	    -EINVAL);
	ck_assert(has(&p, "chat_template_jinja: must be a string"));
	ck_assert(has(&p, "chat_template_kwargs: must be an object"));
	taco_job_free(&job);
}
END_TEST

START_TEST(test_bad_json)
{
	taco_job job;
	taco_job_problems p;

	ck_assert_int_eq(parse("{\"model\": }", &job, &p), -EINVAL);
	ck_assert(has(&p, "line 1"));
	ck_assert_int_eq(parse("[1]", &job, &p), -EINVAL);
	ck_assert(has(&p, "JSON object"));
	ck_assert_int_eq(parse("{\"steps\":1,\"steps\":2}", &job, &p), -EINVAL);
	ck_assert(has(&p, "duplicate"));
}
END_TEST

START_TEST(test_schedules)
{
	taco_job job;
	taco_job_problems p;

	parse("{\"model\":\"m\",\"train\":\"t\",\"output_dir\":\"o\","
	      "\"steps\":110,\"lr\":1.0,\"warmup_steps\":10,\"schedule\":"
	      "\"linear\"}",
	      &job, &p);
	ck_assert_double_eq_tol(taco_job_lr(&job, 1, 110), 0.1, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 10, 110), 1.0, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 11, 110), 1.0, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 61, 110), 0.5, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 110, 110), 0.01, 1e-12);
	job.schedule = TACO_SCHED_COSINE;
	job.min_lr_ratio = 0.2;
	ck_assert_double_eq_tol(taco_job_lr(&job, 11, 110), 1.0, 1e-12);
	ck_assert_double_eq_tol(taco_job_lr(&job, 61, 110), 0.6, 1e-12);
	job.schedule = TACO_SCHED_CONSTANT;
	ck_assert_double_eq_tol(taco_job_lr(&job, 100, 110), 1.0, 1e-12);
	taco_job_free(&job);
}
END_TEST

/* The auto rate: the table of docs/taco.md by method, optimizer and
 * width, times lr_multiplier; an explicit rate stays and refuses a
 * multiplier. */
START_TEST(test_lr_auto)
{
	static const char base[] =
	    "{\"model\":\"m\",\"train\":\"t\",\"output_dir\":\"o\","
	    "\"steps\":10";
	char text[256];
	taco_job job;
	taco_job_problems p;

	parse("{\"model\":\"m\",\"train\":\"t\",\"output_dir\":\"o\","
	      "\"steps\":10}",
	      &job, &p);
	ck_assert(job.lr == 0 && job.lr_multiplier == 1);
	/* measured on widths 64 and 256: flat up to 256 */
	ck_assert(taco_job_lr_auto(&job, 64) == 1e-2);
	ck_assert(taco_job_lr_auto(&job, 256) == 1e-2);
	/* from 2048 on: 3e-5, and geometric between (1024 is 2/3 of the way) */
	ck_assert(taco_job_lr_auto(&job, 5120) == 3e-5);
	ck_assert_double_eq_tol(taco_job_lr_auto(&job, 1024),
				1e-2 * pow(3e-3, 2.0 / 3), 1e-15);
	job.optim.all_adamw = 1;
	ck_assert(taco_job_lr_auto(&job, 64) == 3e-3);
	ck_assert(taco_job_lr_auto(&job, 4096) == 1e-5);
	job.method = TACO_METHOD_DPO;
	ck_assert(taco_job_lr_auto(&job, 64) == 1e-5);
	ck_assert(taco_job_lr_auto(&job, 8192) == 1e-6);
	job.optim.all_adamw = 0;
	ck_assert(taco_job_lr_auto(&job, 64) == 3e-5);
	ck_assert(taco_job_lr_auto(&job, 2048) == 3e-6);
	taco_job_free(&job);

	snprintf(text, sizeof(text),
		 "%s,\"lr\":\"auto\","
		 "\"lr_multiplier\":2.5}",
		 base);
	parse(text, &job, &p);
	ck_assert_int_eq(taco_job_resolve_lr(&job, 64), 1);
	ck_assert_double_eq_tol(job.lr, 2.5e-2, 1e-15);
	/* resolved once: the rate is now the job's own */
	ck_assert_int_eq(taco_job_resolve_lr(&job, 4096), 0);
	ck_assert_double_eq_tol(job.lr, 2.5e-2, 1e-15);
	taco_job_free(&job);

	snprintf(text, sizeof(text), "%s,\"lr\":3e-4}", base);
	parse(text, &job, &p);
	ck_assert_int_eq(taco_job_resolve_lr(&job, 64), 0);
	ck_assert(job.lr == 3e-4);
	taco_job_free(&job);

	snprintf(text, sizeof(text), "%s,\"lr\":3e-4,\"lr_multiplier\":2}",
		 base);
	ck_assert_int_eq(taco_job_parse(text, strlen(text), NULL, &job, &p),
			 -EINVAL);
	ck_assert(has(&p, "lr_multiplier: only with lr auto"));
	taco_job_free(&job);
	snprintf(text, sizeof(text),
		 "%s,\"lr\":\"fast\","
		 "\"lr_multiplier\":0}",
		 base);
	ck_assert_int_eq(taco_job_parse(text, strlen(text), NULL, &job, &p),
			 -EINVAL);
	ck_assert(has(&p, "lr: must be \"auto\" or a number in (0, 10]"));
	ck_assert(has(&p, "lr_multiplier: must be a number in (0, 1000]"));
	taco_job_free(&job);
}
END_TEST

/* A list of option names, as the schema or a document has them. */
typedef struct names {
	int n;
	char v[128][64];
} names;

static void add(names *l, const char *s, size_t len)
{
	ck_assert_int_lt(l->n, 128);
	ck_assert_uint_lt(len, sizeof(l->v[0]));
	memcpy(l->v[l->n], s, len);
	l->v[l->n++][len] = 0;
}

static int in(const names *l, const char *s)
{
	for (int i = 0; i < l->n; i++)
		if (!strcmp(l->v[i], s))
			return 1;
	return 0;
}

static void same(const names *doc, const names *schema, const char *what)
{
	for (int i = 0; i < schema->n; i++)
		ck_assert_msg(in(doc, schema->v[i]), "%s lacks %s", what,
			      schema->v[i]);
	for (int i = 0; i < doc->n; i++)
		ck_assert_msg(in(schema, doc->v[i]),
			      "%s has %s, which job/job_schema.c has not", what,
			      doc->v[i]);
}

static char *source_file(const char *rel)
{
	char path[4096];
	char *text;

	/* TACO_FIXTURES is <repo>/tests/fixtures */
	snprintf(path, sizeof(path), "%s", tu_fixture(rel));
	text = tu_read_file(path, NULL);
	ck_assert_msg(text, "cannot read %s", path);
	return text;
}

/* The key of a line of openapi.yaml at indent ind ("KEY:" alone), or 0. */
static size_t yaml_key(const char *line, size_t len, size_t ind,
		       const char **key)
{
	if (len < ind + 2 || strspn(line, " ") != ind || line[len - 1] != ':')
		return 0;
	*key = line + ind;
	return len - ind - 1;
}

/* docs/job.md and the TacoOptions of api/openapi.yaml name the options of
 * the schema table, no more and no fewer. */
START_TEST(test_schema_documented)
{
	names schema = {0}, request = {0}, doc = {0}, spec = {0};
	char *text, *p, name[64];
	const char *key;
	int in_options = 0, in_props = 0;
	size_t n;

	for (const taco_job_key *k = taco_job_keys; k->name; k++) {
		if (k->setter == TACO_JOB_BY_REQUEST)
			add(&request, k->name, strlen(k->name));
		if (k->type != TACO_JOB_OBJECT) {
			add(&schema, k->name, strlen(k->name));
			continue;
		}
		for (const taco_job_key *f = k->fields; f->name; f++) {
			snprintf(name, sizeof(name), "%s.%s", k->name, f->name);
			add(&schema, name, strlen(name));
			if (k->setter == TACO_JOB_BY_REQUEST)
				add(&request, name, strlen(name));
		}
	}
	ck_assert_str_eq(taco_job_key_find("packing")->name, "packing");
	ck_assert_int_eq(taco_job_key_find("model")->setter,
			 TACO_JOB_BY_DAEMON);
	ck_assert_ptr_null(taco_job_key_find("k"));

	/* docs/job.md: the first cell of each row of the options table */
	text = source_file("../../docs/job.md");
	for (p = text; *p; p += strcspn(p, "\n"), p += *p == '\n') {
		size_t cell = strncmp(p, "| `", 3) ? 0 : strcspn(p + 1, "|");
		for (char *q = p + 1; q < p + 1 + cell;) {
			char *a = memchr(q, '`', (size_t)(p + 1 + cell - q));
			char *b = a ? strchr(a + 1, '`') : NULL;
			if (!b)
				break;
			add(&doc, a + 1, (size_t)(b - a - 1));
			q = b + 1;
		}
	}
	free(text);
	same(&doc, &schema, "docs/job.md");

	/* api/openapi.yaml: TacoOptions' properties (indent 8) and, under
	 * their own properties: (indent 10), theirs (indent 12) */
	text = source_file("../../api/openapi.yaml");
	for (p = text; *p; p += n, p += *p == '\n') {
		size_t kn;

		n = strcspn(p, "\n");
		if (strspn(p, " ") >= n)
			continue; /* blank */
		if (strspn(p, " ") <= 4)
			in_options = !strncmp(p, "    TacoOptions:\n", 17);
		if (!in_options)
			continue;
		if ((kn = yaml_key(p, n, 6, &key))) {
			in_props = !strncmp(key, "properties:", 11) ? 6 : 0;
		} else if (in_props && (kn = yaml_key(p, n, 8, &key))) {
			snprintf(name, sizeof(name), "%.*s", (int)kn, key);
			add(&spec, name, kn);
			in_props = 6;
		} else if (in_props && (kn = yaml_key(p, n, 10, &key))) {
			in_props = !strncmp(key, "properties:", 11) ? 10 : 6;
		} else if (in_props == 10 && (kn = yaml_key(p, n, 12, &key))) {
			char sub[140];
			snprintf(sub, sizeof(sub), "%s.%.*s", name, (int)kn,
				 key);
			add(&spec, sub, strlen(sub));
		}
	}
	free(text);
	same(&spec, &request, "api/openapi.yaml TacoOptions");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("job");
	TCase *tc = tcase_create("job");

	tcase_add_test(tc, test_full_job);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_all_problems_together);
	tcase_add_test(tc, test_bad_json);
	tcase_add_test(tc, test_weights);
	tcase_add_test(tc, test_chat_template_options);
	tcase_add_test(tc, test_method);
	tcase_add_test(tc, test_schedules);
	tcase_add_test(tc, test_lr_auto);
	tcase_add_test(tc, test_schema_documented);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
