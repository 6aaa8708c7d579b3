/* api.js: tacod's REST API as the dashboard uses it: the bearer token
 * (sessionStorage, sent as a header, never a cookie), JSON calls, uploads,
 * downloads, and a job's live events read from the server-sent events
 * stream with fetch (EventSource cannot send an Authorization header).
 * Exposes window.TacoApi. */
'use strict';
(function () {
	const KEY = 'tacod.token';
	const listeners = { unauthorized: [] };

	function token() {
		return sessionStorage.getItem(KEY) || '';
	}
	function setToken(t) {
		if (t)
			sessionStorage.setItem(KEY, t);
		else
			sessionStorage.removeItem(KEY);
	}
	function headers(extra) {
		const h = Object.assign({}, extra || {});
		const t = token();
		if (t)
			h.Authorization = 'Bearer ' + t;
		return h;
	}
	function unauthorized(msg) {
		for (const f of listeners.unauthorized)
			f(msg);
	}

	class ApiError extends Error {
		constructor(status, body) {
			const e = body && body.error ? body.error : null;
			super(e && e.message ? e.message : 'HTTP ' + status);
			this.status = status;
			this.code = e ? e.code : null;
			this.param = e ? e.param : null;
			this.body = body;
		}
	}

	async function call(method, path, body) {
		const init = {
			method: method,
			headers: headers({ Accept: 'application/json' }),
			credentials: 'omit',
			cache: 'no-store',
		};
		if (body instanceof FormData) {
			init.body = body;
		} else if (body !== undefined) {
			init.headers['Content-Type'] = 'application/json';
			init.body = JSON.stringify(body);
		}
		const resp = await fetch(path, init);
		const text = await resp.text();
		let data = null;
		try {
			data = text ? JSON.parse(text) : null;
		} catch (e) {
			data = null;
		}
		if (resp.status === 401)
			unauthorized(data && data.error ? data.error.message : '');
		if (!resp.ok)
			throw new ApiError(resp.status, data);
		return data;
	}

	function upload(file) {
		const fd = new FormData();
		fd.append('purpose', 'fine-tune');
		fd.append('file', file, file.name);
		return call('POST', '/v1/files', fd);
	}

	/* The file name a reply's Content-Disposition gives, else fallback. */
	function dispositionName(resp, fallback) {
		const m = /filename="([^"]*)"/.exec(resp.headers.get('Content-Disposition') || '');
		return m && m[1] ? m[1] : fallback;
	}

	/* A download through fetch, so that it carries the token; the reply is
	 * held in memory (a Blob) until saved: the dashboard's downloads are
	 * for models a browser can hold. Without a token a plain link does,
	 * named by the server's Content-Disposition as the blob is. */
	async function download(path, fallback) {
		const a = document.createElement('a');
		let url = path;
		if (token()) {
			const resp = await fetch(path, { headers: headers(), credentials: 'omit' });
			if (resp.status === 401)
				unauthorized('');
			if (!resp.ok)
				throw new ApiError(resp.status, await resp.json().catch(() => null));
			url = URL.createObjectURL(await resp.blob());
			a.download = dispositionName(resp, fallback);
			setTimeout(() => URL.revokeObjectURL(url), 60000);
		} else {
			a.download = '';
		}
		a.href = url;
		document.body.appendChild(a);
		a.click();
		a.remove();
	}

	/* Parses one block of the stream ("id:", "event:", "data:" lines). */
	function parseBlock(block) {
		const ev = { id: null, event: null, data: [] };
		for (const line of block.split('\n')) {
			const i = line.indexOf(':');
			if (i <= 0)
				continue;
			const k = line.slice(0, i);
			const v = line.slice(i + 1).replace(/^ /, '');
			if (k === 'id')
				ev.id = v;
			else if (k === 'event')
				ev.event = v;
			else if (k === 'data')
				ev.data.push(v);
		}
		ev.data = ev.data.join('\n');
		return ev;
	}

	/* Reads a server-sent events reply, calling onEvent(block) for each
	 * (parseBlock's { id, event, data }) until it returns true (then true)
	 * or the reply ends (false). onRead() (may be null) after each read. */
	async function readEvents(resp, onEvent, onRead) {
		const reader = resp.body.getReader();
		const dec = new TextDecoder();
		let buf = '';
		for (;;) {
			const r = await reader.read();
			if (r.done)
				return false;
			if (onRead)
				onRead();
			buf += dec.decode(r.value, { stream: true }).replace(/\r\n/g, '\n');
			let k;
			while ((k = buf.indexOf('\n\n')) >= 0) {
				const ev = parseBlock(buf.slice(0, k));
				buf = buf.slice(k + 2);
				if (onEvent(ev))
					return true;
			}
		}
	}

	/* A job's events, oldest first, live until the job has finished:
	 * onEvent(event object) for each, onDone() at "[DONE]". A dropped
	 * connection is taken up again from the last event id (1 s, then up to
	 * 10 s apart). Returns { stop() }. */
	function streamEvents(jobId, onEvent, onDone, onError) {
		const url = '/v1/fine_tuning/jobs/' + encodeURIComponent(jobId) + '/events?stream=true';
		let last = null, stopped = false, delay = 1000, ctrl = null;

		async function once() {
			ctrl = new AbortController();
			const h = headers({ Accept: 'text/event-stream' });
			if (last)
				h['Last-Event-ID'] = last;
			const resp = await fetch(url, { headers: h, signal: ctrl.signal, credentials: 'omit', cache: 'no-store' });
			if (resp.status === 401) {
				unauthorized('');
				stopped = true;
				return false;
			}
			if (!resp.ok)
				throw new ApiError(resp.status, await resp.json().catch(() => null));
			return readEvents(resp, (ev) => {
				if (ev.data === '[DONE]')
					return true;
				if (!ev.data)
					return false;
				if (ev.id)
					last = ev.id;
				let obj;
				try {
					obj = JSON.parse(ev.data);
				} catch (e) {
					return false;
				}
				onEvent(obj);
				return false;
			}, () => { delay = 1000; });
		}
		(async function loop() {
			while (!stopped) {
				let done = false;
				try {
					done = await once();
				} catch (e) {
					if (stopped)
						return;
					if (onError)
						onError(e);
					if (e.status === 404)
						return;
				}
				if (done) {
					if (onDone)
						onDone();
					return;
				}
				if (stopped)
					return;
				await new Promise((res) => setTimeout(res, delay));
				delay = Math.min(delay * 2, 10000);
			}
		})();
		return {
			stop() {
				stopped = true;
				if (ctrl)
					ctrl.abort();
			},
		};
	}

	/* A chat completion, streamed (POST /v1/chat/completions): onText(text)
	 * for each piece of choice 0's answer; resolves with the finish reason.
	 * An error before the stream begins is an ApiError; an error event
	 * inside it rejects too. signal (may be null) aborts it. */
	async function chat(body, onText, signal) {
		const resp = await fetch('/v1/chat/completions', {
			method: 'POST', signal, credentials: 'omit', cache: 'no-store',
			headers: headers({ Accept: 'text/event-stream', 'Content-Type': 'application/json' }),
			body: JSON.stringify(Object.assign({}, body, { stream: true })),
		});
		if (resp.status === 401)
			unauthorized('');
		if (!resp.ok)
			throw new ApiError(resp.status, await resp.json().catch(() => null));
		let finish = null;
		await readEvents(resp, (ev) => {
			if (ev.data === '[DONE]')
				return true;
			let obj;
			try {
				obj = JSON.parse(ev.data);
			} catch (e) {
				return false;
			}
			if (obj.error)
				throw new ApiError(500, obj);
			for (const c of obj.choices || []) {
				if (c.index !== 0)
					continue;
				if (c.delta && c.delta.content)
					onText(c.delta.content);
				if (c.finish_reason)
					finish = c.finish_reason;
			}
			return false;
		});
		return finish;
	}

	window.TacoApi = {
		token, setToken, call, upload, download, streamEvents, chat, ApiError,
		onUnauthorized(f) {
			listeners.unauthorized.push(f);
		},
	};
})();
