/* test_serve.c: taco-train --serve (engine/serve.h), the worker of
 * tacod's chat completions, driven over its pipes as tacod drives it: its
 * greedy answer is the engine's own generation of the chat rendered with
 * the model's template, a stream's deltas add up to its answer, a cancel
 * ends a request, bad requests get errors and the worker goes on, and it
 * exits 0 when its input ends. */
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/chat.h"
#include "gen/gen.h"
#include "job/job_opts.h"
#include "model/decode.h"
#include "plan/plan.h"
#include "testutil.h"

typedef struct worker {
	pid_t pid;
	int in, out; /* its stdin (we write), its stdout (we read) */
	FILE *rd;
} worker;

static const char *demo_dir(void)
{
	static char dir[4096];

	snprintf(dir, sizeof(dir), "%s/../../examples/demo/model",
		 tu_fixture("."));
	return dir;
}

static void start(worker *w, const char *rows)
{
	int a[2], b[2];
	const char *d = getenv("TACO_BIN_DIR");
	char bin[4096];

	snprintf(bin, sizeof(bin), "%s/taco-train", d ? d : ".");
	ck_assert(pipe(a) == 0 && pipe(b) == 0);
	w->pid = fork();
	ck_assert(w->pid >= 0);
	if (w->pid == 0) {
		dup2(a[0], 0);
		dup2(b[1], 1);
		close(a[1]);
		close(b[0]);
		execl(bin, bin, "--serve", demo_dir(), "--rows", rows,
		      "--context", "96", (char *)NULL);
		_exit(127);
	}
	close(a[0]);
	close(b[1]);
	w->in = a[1];
	w->rd = fdopen(b[0], "r");
	signal(SIGPIPE, SIG_IGN);
}

static void send_line(worker *w, const char *line)
{
	size_t n = strlen(line);

	ck_assert(write(w->in, line, n) == (ssize_t)n);
	ck_assert(write(w->in, "\n", 1) == 1);
}

static json_t *next(worker *w)
{
	static char line[1 << 20];
	json_error_t e;
	json_t *o;

	ck_assert_msg(fgets(line, sizeof(line), w->rd) != NULL,
		      "the worker's output ended");
	o = json_loads(line, 0, &e);
	ck_assert_msg(o != NULL, "not JSON: %s", line);
	return o;
}

static int finish(worker *w)
{
	int st;

	close(w->in);
	ck_assert(waitpid(w->pid, &st, 0) == w->pid);
	fclose(w->rd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const char *str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k)) ?: "";
}

/* The engine's own greedy answer to one user message. */
static char *engine_answer(const char *user, int max_tokens)
{
	taco_err err = {{0}};
	taco_model *m;
	taco_tok *tok;
	taco_chat *chat;
	taco_kv *kv;
	taco_chat_out co = {0};
	taco_tok_ids ids = {0};
	taco_completion c;
	int32_t stop[TACO_GEN_MAX_STOP_IDS];
	taco_chat_opts o = {demo_dir(), TACO_TEMPLATE_AUTO, NULL, NULL, 0};
	json_t *msgs = json_pack("[{ss ss}]", "role", "user", "content", user);
	char why[256];
	taco_sampling s = {.max_tokens = max_tokens, .top_p = 1.0f};

	ck_assert_int_eq(
	    taco_model_load_as(demo_dir(), tk_cpu_ops(), TK_F32, &m, &err), 0);
	ck_assert_int_eq(taco_tok_load(demo_dir(), &tok, &err), 0);
	ck_assert_int_eq(taco_chat_open(&o, tok, &chat, &err), 0);
	ck_assert_int_eq(taco_chat_render_text(chat, msgs, NULL, 1, &co, why,
					       sizeof(why), &err),
			 0);
	ck_assert_int_eq(taco_tok_encode(tok, co.text, co.len, 0, &ids, &err),
			 0);
	s.n_stop_ids =
	    taco_gen_stop_ids(demo_dir(), tok, stop, TACO_GEN_MAX_STOP_IDS);
	s.stop_ids = stop;
	ck_assert_int_eq(taco_kv_new(m, 1, 96, 64, &kv, &err), 0);
	const int32_t *p[1] = {ids.ids};
	int pl[1] = {(int)ids.n};
	ck_assert_int_eq(
	    taco_generate(m, kv, tok, p, pl, 1, &s, NULL, NULL, &c, &err), 0);
	char *text = strdup(c.text);
	taco_completion_clear(&c);
	taco_kv_free(kv);
	taco_tok_ids_free(&ids);
	taco_chat_out_free(&co);
	taco_chat_free(chat);
	taco_tok_free(tok);
	taco_model_free(m);
	json_decref(msgs);
	return text;
}

START_TEST(test_serve_answers)
{
	worker w;
	json_t *o, *ch;
	char *want = engine_answer("5 numbers after 69", 24);
	char got[4][8192] = {{0}};

	start(&w, "2");
	o = next(&w);
	ck_assert_str_eq(str(o, "event"), "ready");
	ck_assert_int_eq(json_integer_value(json_object_get(o, "context")), 96);
	/* its memory is its plan, byte for byte (the CPU's counters) */
	{
		taco_model *shapes;
		taco_err err = {{0}};
		taco_plan p;
		char cfg[4200];
		taco_config c;
		snprintf(cfg, sizeof(cfg), "%s/config.json", demo_dir());
		ck_assert_int_eq(taco_config_load(cfg, &c, &err), 0);
		ck_assert_int_eq(taco_model_shapes(&c, &shapes, &err), 0);
		/* the demo's weights are bf16, kept as stored in fp32 */
		ck_assert_int_eq(taco_plan_serve(shapes, TACO_BACKEND_CPU,
						 TK_BF16, TK_F32, 2, 96, &p,
						 &err),
				 0);
		ck_assert_uint_eq(p.total,
				  (uint64_t)json_integer_value(
				      json_object_get(o, "device_bytes")));
		taco_model_free(shapes);
	}
	json_decref(o);

	/* greedy: the engine's answer */
	send_line(&w, "{\"id\": \"a\", \"messages\": [{\"role\": \"user\", "
		      "\"content\": \"5 numbers after 69\"}], \"max_tokens\": "
		      "24, \"temperature\": 0}");
	o = next(&w);
	ck_assert_str_eq(str(o, "event"), "done");
	ch = json_array_get(json_object_get(o, "choices"), 0);
	ck_assert_str_eq(str(ch, "text"), want);
	ck_assert_int_gt(json_integer_value(json_object_get(
			     json_object_get(o, "usage"), "prompt_tokens")),
			 0);
	json_decref(o);

	/* a stream of two completions: the deltas add up to each */
	send_line(&w, "{\"id\": \"b\", \"messages\": [{\"role\": \"user\", "
		      "\"content\": \"3 numbers after 9\"}], \"max_tokens\": "
		      "16, \"temperature\": 1.0, \"seed\": 5, \"n\": 2, "
		      "\"stream\": true}");
	for (;;) {
		o = next(&w);
		ck_assert_str_eq(str(o, "id"), "b");
		if (!strcmp(str(o, "event"), "done"))
			break;
		ck_assert_str_eq(str(o, "event"), "delta");
		strcat(got[json_integer_value(json_object_get(o, "index"))],
		       str(o, "text"));
		json_decref(o);
	}
	for (int i = 0; i < 2; i++) {
		ch = json_array_get(json_object_get(o, "choices"), i);
		ck_assert_str_eq(str(ch, "text"), got[i]);
	}
	json_decref(o);

	/* bad requests: an error each, and the worker goes on */
	send_line(&w, "not json");
	send_line(&w, "{\"id\": \"c\", \"messages\": [{\"role\": \"user\", "
		      "\"content\": \"x\"}], \"max_tokens\": 95}");
	send_line(&w, "{\"id\": \"d\", \"messages\": [{\"role\": \"user\", "
		      "\"content\": \"x\"}], \"n\": 3}");
	send_line(&w, "{\"id\": \"e\", \"messages\": []}");
	o = next(&w);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "status")), 400);
	json_decref(o);
	o = next(&w);
	ck_assert_str_eq(str(o, "code"), "context_length_exceeded");
	json_decref(o);
	o = next(&w);
	ck_assert_str_eq(str(o, "id"), "d");
	ck_assert_ptr_nonnull(strstr(str(o, "message"), "1 to 2"));
	json_decref(o);
	o = next(&w);
	ck_assert_str_eq(str(o, "param"), "messages");
	json_decref(o);

	/* a cancel while it streams */
	send_line(&w, "{\"id\": \"f\", \"messages\": [{\"role\": \"user\", "
		      "\"content\": \"6 numbers after 1\"}], \"max_tokens\": "
		      "60, \"temperature\": 1.0, \"stream\": true}");
	o = next(&w);
	ck_assert_str_eq(str(o, "event"), "delta");
	json_decref(o);
	send_line(&w, "{\"cancel\": \"f\"}");
	do {
		o = next(&w);
		if (!strcmp(str(o, "event"), "error"))
			break;
		ck_assert_str_eq(str(o, "event"), "delta");
		json_decref(o);
	} while (1);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "status")), 499);
	json_decref(o);
	ck_assert_int_eq(finish(&w), 0);
	free(want);
}
END_TEST

START_TEST(test_serve_bad_model)
{
	worker w;
	json_t *o;
	int a[2], b[2];
	const char *d = getenv("TACO_BIN_DIR");
	char bin[4096];

	snprintf(bin, sizeof(bin), "%s/taco-train", d ? d : ".");
	ck_assert(pipe(a) == 0 && pipe(b) == 0);
	w.pid = fork();
	if (w.pid == 0) {
		dup2(a[0], 0);
		dup2(b[1], 1);
		close(a[1]);
		close(b[0]);
		execl(bin, bin, "--serve", "/nonexistent", (char *)NULL);
		_exit(127);
	}
	close(a[0]);
	close(b[1]);
	w.in = a[1];
	w.rd = fdopen(b[0], "r");
	o = next(&w);
	ck_assert_str_eq(str(o, "code"), "load_failed");
	ck_assert_ptr_nonnull(strstr(str(o, "message"), "/nonexistent"));
	json_decref(o);
	ck_assert_int_eq(finish(&w), 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("serve");
	TCase *tc = tcase_create("serve");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_serve_answers);
	tcase_add_test(tc, test_serve_bad_model);
	suite_add_tcase(s, tc);
	return tu_run(s, 0);
}
