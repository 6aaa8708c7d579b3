/* progress.c: rendering of job events (progress.h). */
#include "progress.h"

#include <math.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define REDRAW_S 0.1  /* at most ten redraws a second */
#define LIVE_SKEW_S 3 /* an event this recent arrived live */

static double progress_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ctl_progress_init(ctl_progress *p, FILE *f, int tty)
{
	struct winsize ws;

	memset(p, 0, sizeof(*p));
	p->f = f;
	p->tty = tty;
	p->width = 80;
	if (tty && !ioctl(fileno(f), TIOCGWINSZ, &ws) && ws.ws_col >= 40)
		p->width = ws.ws_col < sizeof(p->line) - 1
			       ? ws.ws_col
			       : sizeof(p->line) - 1;
}

static void draw(ctl_progress *p)
{
	/* \r and erase-to-end: the new line over the old one */
	fprintf(p->f, "\r%s\033[K", p->line);
	fflush(p->f);
	p->drawn = 1;
	p->pending = 0;
	p->last_draw = progress_now_s();
}

/* Prints a whole line, above the progress line on a terminal. */
static void print_line(ctl_progress *p, const char *text)
{
	if (p->tty && p->drawn)
		fputs("\r\033[K", p->f);
	fprintf(p->f, "%s\n", text);
	if (p->tty && p->drawn)
		draw(p);
	else
		fflush(p->f);
}

/* Seconds left, from the server's eta_s or the step rate; NAN if unknown. */
static double eta(ctl_progress *p, json_t *data, long long created,
		  long long step, long long total)
{
	json_t *e = json_object_get(data, "eta_s");
	double t = progress_now_s();

	if (step >= total)
		return 0;
	if (json_is_number(e))
		return json_number_value(e);
	if (created >= (long long)time(NULL) - LIVE_SKEW_S) {
		if (!p->have_live) {
			p->have_live = 1;
			p->live_t0 = t;
			p->live_s0 = step;
		} else if (t - p->live_t0 >= 0.3 && step > p->live_s0) {
			return (double)(total - step) * (t - p->live_t0) /
			       (double)(step - p->live_s0);
		}
	}
	if (!p->have_old) {
		p->have_old = 1;
		p->old_t0 = created;
		p->old_s0 = step;
	} else if (created - p->old_t0 >= 2 && step > p->old_s0) {
		return (double)(total - step) * (double)(created - p->old_t0) /
		       (double)(step - p->old_s0);
	}
	return NAN;
}

static void progress_print(ctl_progress *p, json_t *ev, json_t *data)
{
	long long step = ctl_int(data, "step");
	long long total = ctl_int(data, "total_steps");
	double loss = json_number_value(json_object_get(data, "train_loss"));
	double tps = json_number_value(json_object_get(data, "tokens_per_s"));
	double left = eta(p, data, ctl_int(ev, "created_at"), step, total);
	char when[32], etas[32], head[64], tail[160], bar[256];
	int bw, fill;

	ctl_fmt_duration(left, etas, sizeof(etas));
	snprintf(head, sizeof(head), "step %lld/%lld", step, total);
	if (json_object_get(data, "rewards/accuracies")) /* DPO */
		snprintf(
		    tail, sizeof(tail),
		    "loss %.4f  reward acc %.0f%%  margin %.3f  %.0f tok/s  "
		    "ETA %s",
		    loss,
		    100 * json_number_value(
			      json_object_get(data, "rewards/accuracies")),
		    json_number_value(json_object_get(data, "rewards/margins")),
		    tps, etas);
	else
		snprintf(tail, sizeof(tail), "loss %.4f  %.0f tok/s  ETA %s",
			 loss, tps, etas);
	if (!p->tty) {
		char line[300];
		ctl_fmt_time(ctl_int(ev, "created_at"), when, sizeof(when));
		snprintf(line, sizeof(line), "%s  %s  %s", when, head, tail);
		print_line(p, line);
		return;
	}
	/* "step 12/300 [=====>    ]  4%  loss ...": the bar takes the room
	 * left on the line, within 10..50 columns */
	bw = p->width - (int)strlen(head) - (int)strlen(tail) - 12;
	bw = bw < 10 ? 10 : bw > 50 ? 50 : bw;
	fill = total > 0 ? (int)((double)bw * (double)step / (double)total) : 0;
	fill = fill < 0 ? 0 : fill > bw ? bw : fill;
	memset(bar, '=', (size_t)fill);
	memset(bar + fill, ' ', (size_t)(bw - fill));
	if (fill < bw && fill > 0)
		bar[fill - 1] = '>';
	bar[bw] = 0;
	snprintf(p->line, sizeof(p->line), "%s [%s] %3d%%  %s", head, bar,
		 total > 0 ? (int)(100 * step / total) : 0, tail);
	if ((int)strlen(p->line) > p->width - 1)
		p->line[p->width - 1] = 0;
	p->pending = 1;
	if (step >= total || progress_now_s() - p->last_draw >= REDRAW_S)
		draw(p);
}

/* text of at most n bytes on one line: newlines as spaces, "..." where
 * cut (at a character boundary) */
static void one_line(char *out, size_t cap, const char *text, size_t n)
{
	size_t len = text ? strlen(text) : 0, i = 0, k = 0;

	if (len > n) {
		len = n;
		while (len && ((unsigned char)text[len] & 0xC0) == 0x80)
			len--;
	}
	for (; i < len && k + 4 < cap; i++)
		out[k++] = text[i] == '\n' || text[i] == '\r' ? ' ' : text[i];
	if (text && i < strlen(text) && k + 4 < cap) {
		memcpy(out + k, "...", 3);
		k += 3;
	}
	out[k] = 0;
}

/* An evaluation's answers (the job's eval_samples): one line each, the
 * prompt, the answer and, where it differs, the reference. */
static void samples(ctl_progress *p, json_t *data)
{
	json_t *s;
	size_t i;

	json_array_foreach(json_object_get(data, "samples"), i, s)
	{
		char pr[200], an[200], re[200], line[700];
		int match = json_is_true(json_object_get(s, "match"));
		one_line(pr, sizeof(pr), ctl_str(s, "prompt"), 60);
		one_line(an, sizeof(an), ctl_str(s, "answer"), 80);
		one_line(re, sizeof(re), ctl_str(s, "reference"), 80);
		snprintf(line, sizeof(line), "    [%s] %s => %s%s%s%s",
			 match ? "ok" : "--", pr, an,
			 match ? "" : " (reference: ", match ? "" : re,
			 match ? "" : ")");
		print_line(p, line);
	}
}

static void evaluation(ctl_progress *p, json_t *ev, json_t *data)
{
	char when[32], line[400];
	int n;

	ctl_fmt_time(ctl_int(ev, "created_at"), when, sizeof(when));
	n = snprintf(line, sizeof(line), "%s  evaluation at step %lld:", when,
		     ctl_int(data, "step"));
	if (json_object_get(data, "val_rewards/accuracies")) /* DPO */
		n += snprintf(
		    line + n, sizeof(line) - (size_t)n,
		    " val_loss %.4f, reward accuracy %.1f%%, margin %.3f",
		    json_number_value(json_object_get(data, "val_loss")),
		    100 * json_number_value(
			      json_object_get(data, "val_rewards/accuracies")),
		    json_number_value(
			json_object_get(data, "val_rewards/margins")));
	else if (json_object_get(data, "val_loss"))
		n += snprintf(
		    line + n, sizeof(line) - (size_t)n,
		    " val_loss %.4f, token accuracy %.1f%%",
		    json_number_value(json_object_get(data, "val_loss")),
		    100 * json_number_value(
			      json_object_get(data, "val_token_accuracy")));
	if (json_object_get(data, "mc_accuracy") && n < (int)sizeof(line))
		snprintf(line + n, sizeof(line) - (size_t)n,
			 " multiple-choice accuracy %.1f%% of %lld",
			 100 * json_number_value(
				   json_object_get(data, "mc_accuracy")),
			 ctl_int(data, "mc_examples"));
	n = (int)strlen(line);
	if (json_object_get(data, "val_exact_match") && n < (int)sizeof(line))
		snprintf(line + n, sizeof(line) - (size_t)n,
			 ", exact match %.1f%% of %zu",
			 100 * json_number_value(
				   json_object_get(data, "val_exact_match")),
			 json_array_size(json_object_get(data, "samples")));
	print_line(p, line);
	samples(p, data);
}

void ctl_progress_event(ctl_progress *p, json_t *ev)
{
	json_t *data = json_object_get(ev, "data");
	char when[32], line[1200];

	if (!strcmp(ctl_str(ev, "type"), "metrics") &&
	    json_object_get(data, "total_steps") &&
	    !json_object_get(data, "val_loss")) {
		progress_print(p, ev, data);
		return;
	}
	if (!strcmp(ctl_str(ev, "type"), "metrics") &&
	    (json_object_get(data, "val_loss") ||
	     json_object_get(data, "mc_accuracy"))) {
		evaluation(p, ev, data);
		return;
	}
	ctl_fmt_time(ctl_int(ev, "created_at"), when, sizeof(when));
	snprintf(line, sizeof(line), "%s  %s%s", when,
		 strcmp(ctl_str(ev, "level"), "error") ? "" : "error: ",
		 ctl_str(ev, "message"));
	for (char *c = line; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
	print_line(p, line);
}

void ctl_progress_flush(ctl_progress *p)
{
	if (p->tty && p->pending)
		draw(p);
}

void ctl_progress_end(ctl_progress *p)
{
	if (p->tty && p->pending)
		draw(p);
	if (p->tty && p->drawn)
		fputc('\n', p->f);
	p->drawn = 0;
	fflush(p->f);
}
