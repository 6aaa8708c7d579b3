/* config.c: where tacoctl finds tacod and its token. Each of the two is
 * taken from the first that sets it: --url/--token, TACOD_URL/TACOD_TOKEN,
 * the config file ($XDG_CONFIG_HOME/tacoctl/config.json, else
 * ~/.config/tacoctl/config.json: {"url": ..., "token": ...}); the URL
 * defaults to CTL_DEFAULT_URL. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"

static int config_path(char *out, size_t cap)
{
	const char *xdg = getenv("XDG_CONFIG_HOME");
	const char *home = getenv("HOME");

	if (xdg && xdg[0] == '/')
		snprintf(out, cap, "%s/tacoctl/config.json", xdg);
	else if (home && home[0])
		snprintf(out, cap, "%s/.config/tacoctl/config.json", home);
	else
		return -ENOENT;
	return 0;
}

/* The config file's object; NULL with *rc = 0 when there is none. */
static json_t *ctl_load_config(const char *path, int *rc)
{
	json_error_t je;
	struct stat st;
	json_t *j;
	char *text;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t got = 0, r;

	*rc = CTL_OK;
	if (fd < 0) {
		if (errno != ENOENT)
			*rc = ctl_fail("cannot read %s: %s", path,
				       strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
	    st.st_size > (off_t)CTL_CONFIG_MAX) {
		close(fd);
		*rc = ctl_fail("%s: not a regular file of at most %u KiB", path,
			       CTL_CONFIG_MAX >> 10);
		return NULL;
	}
	text = malloc((size_t)st.st_size + 1);
	while (text && got < st.st_size &&
	       ((r = read(fd, text + got, (size_t)(st.st_size - got))) > 0 ||
		(r < 0 && errno == EINTR)))
		got += r > 0 ? r : 0;
	close(fd);
	if (!text || got != st.st_size) {
		free(text);
		*rc = ctl_fail("cannot read %s", path);
		return NULL;
	}
	j = json_loadb(text, (size_t)got, 0, &je);
	free(text);
	if (!j || !json_is_object(j)) {
		*rc = j ? ctl_fail("%s: not a JSON object", path)
			: ctl_fail("%s: line %d: %s", path, je.line, je.text);
		json_decref(j);
		return NULL;
	}
	for (size_t i = 0; i < 2; i++) {
		const char *k = i ? "token" : "url";
		json_t *v = json_object_get(j, k);
		if (v && !json_is_string(v)) {
			*rc = ctl_fail("%s: \"%s\" must be a string", path, k);
			json_decref(j);
			return NULL;
		}
	}
	return j;
}

int ctl_connect(ctl *c)
{
	const char *url = c->url_flag, *token = c->token_flag;
	char path[4096];
	json_t *cfg = NULL;
	ctl_err err = {0};
	int rc;

	if (c->connected)
		return CTL_OK;
	if (!url)
		url = getenv("TACOD_URL");
	if (!token)
		token = getenv("TACOD_TOKEN");
	if ((!url || !url[0] || !token) && !config_path(path, sizeof(path))) {
		cfg = ctl_load_config(path, &rc);
		if (rc)
			return rc;
	}
	if (!url || !url[0])
		url = json_string_value(json_object_get(cfg, "url"));
	if (!url || !url[0])
		url = CTL_DEFAULT_URL;
	if (!token)
		token = json_string_value(json_object_get(cfg, "token"));
	rc = ctl_http_init(&c->http, url, token, &err);
	json_decref(cfg);
	if (rc) {
		ctl_http_free(&c->http);
		return ctl_fail("%s", err.msg);
	}
	c->connected = 1;
	return CTL_OK;
}

void ctl_disconnect(ctl *c)
{
	if (c->connected)
		ctl_http_free(&c->http);
	c->connected = 0;
}
