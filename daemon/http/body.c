/* http/body.c: the request body, read within the limits: into memory, or
 * for a route with an upload_dir a multipart/form-data body whose file
 * part goes to a temporary file (hashed as it arrives) and whose other
 * fields go to memory. An error found on the way is deferred until the
 * body has been read (the rest is discarded); then the handler runs. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "daemon/http/internal.h"
#include "util/text.h"

#define DISCARD_MAX (16ull << 20) /* body read past an error, then drop */
#define FORM_SLACK (64u << 10)	  /* multipart framing beyond the file */

static void vset_fail(tacod_http_req *r, int status, const char *code,
		      const char *param, const char *fmt, va_list ap)
{
	if (r->fail_status)
		return;
	r->fail_status = status;
	r->fail_code = code;
	snprintf(r->fail_param, sizeof(r->fail_param), "%s",
		 param ? param : "");
	http_utf8_fix(r->fail_param);
	taco_text_vformat(r->fail_msg, sizeof(r->fail_msg), fmt, ap);
	http_utf8_fix(r->fail_msg);
}

/* Fails the request once its body has been read (the rest is
 * discarded). */
static void defer_fail(tacod_http_req *r, int status, const char *code,
		       const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void defer_fail(tacod_http_req *r, int status, const char *code,
		       const char *param, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset_fail(r, status, code, param, fmt, ap);
	va_end(ap);
}

/* The upload could not be written (e, an errno): 507 when the storage is
 * full or failing, else 500; neither names the temporary file. */
static void defer_store_fail(tacod_http_req *r, int e)
{
	if (tacod_http_storage_errno(-e))
		defer_fail(r, 507, "insufficient_storage", NULL, "%s",
			   TACOD_HTTP_STORAGE_MSG);
	else
		defer_fail(r, 500, NULL, NULL, "cannot store the upload: %s",
			   strerror(e));
}

static int send_fail(tacod_http_req *r)
{
	return tacod_http_error(
	    r, r->fail_status,
	    r->fail_status >= 500 ? "server_error" : "invalid_request_error",
	    r->fail_code, r->fail_param[0] ? r->fail_param : NULL, "%s",
	    r->fail_msg);
}

void http_drop_temp(tacod_http_req *r)
{
	if (r->file_fd >= 0) {
		close(r->file_fd);
		r->file_fd = -1;
	}
	if (r->tmp_live) {
		unlink(r->up.path);
		r->tmp_live = 0;
	}
}

/* The multipart iterator: the file part goes to a temporary file, the
 * other fields to memory. */
static enum MHD_Result body_on_part(void *cls, enum MHD_ValueKind kind,
				    const char *key, const char *filename,
				    const char *content_type,
				    const char *transfer_encoding,
				    const char *data, uint64_t off, size_t size)
{
	tacod_http_req *r = cls;
	tacod_http_server *srv = r->srv;

	(void)kind;
	(void)transfer_encoding;
	if (r->fail_status)
		return MHD_NO;
	if (!key)
		key = "";
	if (filename) {
		if (!r->file_started) {
			r->file_started = 1;
			snprintf(r->up.field, sizeof(r->up.field), "%s", key);
			snprintf(r->up.filename, sizeof(r->up.filename), "%s",
				 filename);
			http_utf8_fix(r->up.filename);
			snprintf(r->up.content_type, sizeof(r->up.content_type),
				 "%s", content_type ? content_type : "");
			snprintf(r->up.path, sizeof(r->up.path),
				 "%s/.upload-XXXXXX", r->route->r->upload_dir);
			r->file_fd = mkostemp(r->up.path, O_CLOEXEC);
			if (r->file_fd < 0) {
				defer_store_fail(r, errno);
				return MHD_NO;
			}
			r->tmp_live = 1;
			tacod_auth_sha256_init(&r->sha);
		} else if (strcmp(key, r->up.field) ||
			   strncmp(filename, r->up.filename,
				   sizeof(r->up.filename) - 1) ||
			   (off == 0 && r->up.size > 0) || r->file_fd < 0) {
			defer_fail(r, 400, NULL, key,
				   "Only one file may be uploaded per "
				   "request.");
			http_drop_temp(r);
			return MHD_NO;
		}
		if (r->up.size + size > srv->max_upload) {
			defer_fail(r, 413, "file_too_large", key,
				   "The file is larger than the limit of "
				   "%llu bytes.",
				   (unsigned long long)srv->max_upload);
			http_drop_temp(r);
			return MHD_NO;
		}
		for (size_t done = 0; done < size;) {
			ssize_t w = write(r->file_fd, data + done, size - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				/* no progress on a regular file: no room */
				defer_store_fail(r, w < 0 ? errno : ENOSPC);
				http_drop_temp(r);
				return MHD_NO;
			}
			done += (size_t)w;
		}
		tacod_auth_sha256_update(&r->sha, data, size);
		r->up.size += size;
		return MHD_YES;
	}
	/* A plain field: a continuation of the last one, or a new one. */
	kv *last = r->nform ? &r->form[r->nform - 1] : NULL;
	if (!(last && !strcmp(last->k, key) && off == last->vlen)) {
		if (r->nform == MAX_FIELDS) {
			defer_fail(r, 400, NULL, key,
				   "Too many form fields (at most %d).",
				   MAX_FIELDS);
			return MHD_NO;
		}
		last = &r->form[r->nform];
		last->k = strdup(key);
		last->v = calloc(1, 1);
		last->vlen = 0;
		if (!last->k || !last->v) {
			free(last->k);
			free(last->v);
			defer_fail(r, 500, NULL, NULL, "out of memory");
			return MHD_NO;
		}
		r->nform++;
		r->form_bytes += strlen(key);
	}
	r->form_bytes += size;
	if (r->form_bytes > TACOD_HTTP_FORM_MAX) {
		defer_fail(r, 413, "request_too_large", key,
			   "The form fields are larger than %u bytes.",
			   TACOD_HTTP_FORM_MAX);
		return MHD_NO;
	}
	if (size) {
		char *nv = realloc(last->v, last->vlen + size + 1);
		if (!nv) {
			defer_fail(r, 500, NULL, NULL, "out of memory");
			return MHD_NO;
		}
		memcpy(nv + last->vlen, data, size);
		last->vlen += size;
		nv[last->vlen] = 0;
		last->v = nv;
	}
	return MHD_YES;
}

/* Refuses the request before its body is read. Without a body the answer
 * waits for the request's last call, which keeps the connection alive; with
 * one it goes now and MHD closes the connection instead of reading on. */
int http_reject(tacod_http_req *r, int status, const char *code,
		const char *param, const char *fmt, ...)
{
	va_list ap;

	if (r->fail_status)
		return 0;
	va_start(ap, fmt);
	vset_fail(r, status, code, param, fmt, ap);
	va_end(ap);
	r->mode = BODY_DISCARD;
	if (!r->has_body)
		return 0;
	return send_fail(r) ? -1 : 0;
}

/* How the body is read: a multipart/form-data upload to the route's
 * upload_dir, or the body in memory; either refused at once when its
 * Content-Length is over the limit. */
int http_body_mode(tacod_http_req *r, int have_len, uint64_t clen)
{
	tacod_http_server *srv = r->srv;
	const char *ct = MHD_lookup_connection_value(
	    r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);

	if (r->route->r->upload_dir && ct &&
	    !strncasecmp(ct, "multipart/form-data", 19)) {
		if (have_len &&
		    clen > srv->max_upload + TACOD_HTTP_FORM_MAX + FORM_SLACK)
			return http_reject(
			    r, 413, "file_too_large", "file",
			    "The upload is larger than the limit of "
			    "%llu bytes.",
			    (unsigned long long)srv->max_upload);
		r->pp = MHD_create_post_processor(r->conn, 64 * 1024,
						  body_on_part, r);
		if (!r->pp)
			return http_reject(r, 400, NULL, NULL,
					   "The multipart/form-data body "
					   "has no usable boundary.");
		r->mode = BODY_FORM;
	} else {
		if (have_len && clen > srv->max_body)
			return http_reject(
			    r, 413, "request_too_large", NULL,
			    "The request body is larger than the limit "
			    "of %llu bytes.",
			    (unsigned long long)srv->max_body);
		r->mode = BODY_MEM;
	}
	return 0;
}

/* A piece of the body. Returns 0, or -1 to drop the connection. */
int http_consume(tacod_http_req *r, const char *data, size_t n)
{
	tacod_http_server *srv = r->srv;

	if (r->replied)
		return 0;
	if (r->fail_status)
		r->mode = BODY_DISCARD;
	switch (r->mode) {
	case BODY_MEM:
		if (r->len + n > srv->max_body) {
			defer_fail(r, 413, "request_too_large", NULL,
				   "The request body is larger than the limit "
				   "of %llu bytes.",
				   (unsigned long long)srv->max_body);
			free(r->body);
			r->body = NULL;
			r->len = r->cap = 0;
			r->mode = BODY_DISCARD;
			break;
		}
		if (r->len + n + 1 > r->cap) {
			size_t cap = r->cap ? r->cap : 4096;
			char *nb;
			while (cap < r->len + n + 1)
				cap *= 2;
			nb = realloc(r->body, cap);
			if (!nb)
				return -1;
			r->body = nb;
			r->cap = cap;
		}
		memcpy(r->body + r->len, data, n);
		r->len += n;
		r->body[r->len] = 0;
		return 0;
	case BODY_FORM:
		if (MHD_post_process(r->pp, data, n) != MHD_YES) {
			defer_fail(r, 400, NULL, NULL,
				   "The multipart/form-data body is "
				   "malformed.");
			r->mode = BODY_DISCARD;
			http_drop_temp(r);
		}
		return 0;
	default:
		break;
	}
	r->discarded += n;
	return r->discarded > DISCARD_MAX ? -1 : 0;
}

/* The body is complete: run the handler. Returns 0, or -1 to drop the
 * connection. */
int http_finish(tacod_http_req *r)
{
	tacod_http_server *srv = r->srv;
	int rc;

	if (r->replied)
		return 0;
	if (r->later) /* resumed: the answer came */
		return http_later_finish(r);
	if (r->pp) {
		if (MHD_destroy_post_processor(r->pp) != MHD_YES)
			defer_fail(r, 400, NULL, NULL,
				   "The multipart/form-data body is "
				   "incomplete.");
		r->pp = NULL;
	}
	if (r->file_started && r->file_fd >= 0) {
		uint8_t d[32];
		/* on disk before the store says it exists; a full disk may
		 * only tell at fsync or close (NFS, quotas) */
		int e = fsync(r->file_fd) && errno != EINVAL ? errno : 0;
		if (close(r->file_fd) && !e)
			e = errno;
		if (e)
			defer_store_fail(r, e);
		r->file_fd = -1;
		tacod_auth_sha256_final(&r->sha, d);
		tacod_auth_hex(d, r->up.sha256);
	}
	if (r->fail_status) {
		http_drop_temp(r);
		return send_fail(r) ? -1 : 0;
	}
	rc = r->route->r->handler(r, srv->ctx);
	http_drop_temp(r); /* unless the handler kept it */
	if (r->later && !r->replied)
		return http_later_finish(r);
	if (!r->replied &&
	    tacod_http_error(r, 500, "server_error", NULL, NULL,
			     "The server failed to answer the request%s%s.",
			     rc < 0 ? ": " : "", rc < 0 ? strerror(-rc) : ""))
		return -1;
	return 0;
}

const char *tacod_http_body(const tacod_http_req *r, size_t *len)
{
	if (len)
		*len = r->body ? r->len : 0;
	return r->body ? r->body : "";
}

json_t *tacod_http_body_json(tacod_http_req *r)
{
	json_error_t jerr;
	json_t *j;

	if (!r->body || !r->len) {
		tacod_http_error(r, 400, "invalid_request_error", NULL, NULL,
				 "The request needs a JSON body.");
		return NULL;
	}
	j = json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		tacod_http_error(r, 400, "invalid_request_error", NULL, NULL,
				 "We could not parse the JSON body of your "
				 "request: line %d: %s",
				 jerr.line, jerr.text);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		tacod_http_error(r, 400, "invalid_request_error", NULL, NULL,
				 "The JSON body must be an object.");
		return NULL;
	}
	return j;
}

const tacod_http_upload *tacod_http_upload_file(const tacod_http_req *r)
{
	return r->file_started ? &r->up : NULL;
}

const char *tacod_http_form(const tacod_http_req *r, const char *name)
{
	return http_kv_get(r->form, r->nform, name);
}

int tacod_http_upload_keep(tacod_http_req *r, const char *dest, taco_err *err)
{
	if (!r->file_started || !r->tmp_live)
		return taco_err_set(err, -ENOENT, "http: no uploaded file");
	if (rename(r->up.path, dest) < 0)
		return taco_err_set(err, -errno, "http: rename %s to %s: %s",
				    r->up.path, dest, strerror(errno));
	r->tmp_live = 0;
	snprintf(r->up.path, sizeof(r->up.path), "%s", dest);
	return 0;
}
