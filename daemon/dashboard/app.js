/* app.js: the dashboard's pages (docs/dashboard.md), routed by the URL's
 * fragment: #/jobs (the list, filtered by status), #/job/<id> (one job,
 * live), #/new (upload, plan, create), #/playground (chat with models,
 * two side by side), #/device. Every string that comes
 * from the API goes into the page as text (el() below makes text nodes;
 * nothing here parses HTML), so a suffix or metadata value holding markup
 * shows as that markup. */
'use strict';
(function () {
	const A = window.TacoApi, C = window.TacoCharts;
	const main = document.getElementById('main');
	const STATUSES = ['validating_files', 'queued', 'running', 'paused', 'succeeded', 'failed', 'cancelled'];
	const FINAL = ['succeeded', 'failed', 'cancelled'];
	let page = null; /* the current page's cleanup: { stop() } */

	/* ---- building the page: text only ---- */

	/* el('tr', {class: 'x', dataset: {id}}, 'text', child, [more]) */
	function el(tag, props, ...kids) {
		const e = document.createElement(tag);
		for (const [k, v] of Object.entries(props || {})) {
			if (v === undefined || v === null || v === false)
				continue;
			if (k === 'class')
				e.className = v;
			else if (k === 'dataset')
				Object.assign(e.dataset, v);
			else if (k === 'on')
				for (const [ev, f] of Object.entries(v))
					e.addEventListener(ev, f);
			else if (k in e && k !== 'list')
				e[k] = v;
			else
				e.setAttribute(k, v);
		}
		append(e, kids);
		return e;
	}
	function append(e, ...kids) {
		for (const k of kids.flat(Infinity)) {
			if (k === null || k === undefined || k === false)
				continue;
			e.appendChild(k instanceof Node ? k : document.createTextNode(String(k)));
		}
		return e;
	}
	function clear(e) {
		while (e.firstChild)
			e.removeChild(e.firstChild);
		return e;
	}
	function badge(status) {
		const known = STATUSES.includes(status) ? status : 'unknown';
		return el('span', { class: 'badge s-' + known, dataset: { status: String(status) } }, String(status));
	}
	function pad2(n) {
		return String(n).padStart(2, '0');
	}
	function when(sec) {
		if (!sec)
			return '–';
		const d = new Date(sec * 1000);
		return d.getFullYear() + '-' + pad2(d.getMonth() + 1) + '-' + pad2(d.getDate()) + ' ' +
			pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + ':' + pad2(d.getSeconds());
	}
	function duration(s) {
		if (s === null || s === undefined || !isFinite(s))
			return '–';
		s = Math.max(0, Math.round(s));
		if (s < 60)
			return s + ' s';
		if (s < 3600)
			return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
		return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
	}
	function num(v, digits) {
		return v === null || v === undefined ? '–' : Number(v).toFixed(digits);
	}
	function errorText(e) {
		if (e instanceof A.ApiError)
			return e.message + (e.code ? ' (' + e.code + ')' : '');
		return String(e && e.message ? e.message : e);
	}
	function errorBox(e) {
		return el('p', { class: 'error' }, errorText(e));
	}
	function jobLink(id) {
		return el('a', { href: '#/job/' + encodeURIComponent(id), class: 'mono' }, id);
	}
	/* Polls f every ms until stopped; f's errors show in box (or vanish
	 * when it next succeeds). */
	function poller(f, ms, box) {
		let stopped = false, timer = null;
		async function tick() {
			try {
				await f();
				if (box)
					clear(box);
			} catch (e) {
				if (box && !stopped)
					append(clear(box), [errorBox(e)]);
			}
			if (!stopped)
				timer = setTimeout(tick, ms);
		}
		tick();
		return { stop() { stopped = true; clearTimeout(timer); } };
	}

	/* ---- the token prompt ---- */

	const dlg = document.getElementById('token-dialog');
	const tokenInput = document.getElementById('token-input');
	function showToken(why) {
		document.getElementById('token-why').textContent = why || '';
		tokenInput.value = A.token();
		dlg.classList.remove('hidden');
		tokenInput.focus();
	}
	function hideToken() {
		dlg.classList.add('hidden');
	}
	document.getElementById('token-form').addEventListener('submit', (ev) => {
		ev.preventDefault();
		A.setToken(tokenInput.value.trim());
		hideToken();
		route();
	});
	document.getElementById('token-clear').addEventListener('click', () => {
		A.setToken('');
		tokenInput.value = '';
	});
	document.getElementById('token-close').addEventListener('click', hideToken);
	document.getElementById('token-button').addEventListener('click', () => showToken(''));
	A.onUnauthorized((msg) => {
		if (dlg.classList.contains('hidden'))
			showToken((msg || 'This tacod needs a token.') + ' Enter a token of its tokens file.');
	});

	/* ---- #/jobs ---- */

	/* A failed or cancelled job's progress, {step, total} or null, by id
	 * and status: asked once; a running or paused job's at every poll. */
	const progressCache = new Map();

	async function jobProgress(job) {
		if (job.status === 'succeeded')
			return { step: 1, total: 1 };
		if (!['running', 'paused', 'failed', 'cancelled'].includes(job.status))
			return null;
		const key = ['failed', 'cancelled'].includes(job.status) ? job.id + ' ' + job.status : null;
		if (key && progressCache.has(key))
			return progressCache.get(key);
		const ev = await A.call('GET', '/v1/fine_tuning/jobs/' + encodeURIComponent(job.id) + '/events?limit=20');
		let p = null;
		for (const e of ev.data)
			if (e.type === 'metrics' && e.data && typeof e.data.total_steps === 'number') {
				p = { step: e.data.step, total: e.data.total_steps };
				break;
			}
		if (key)
			progressCache.set(key, p);
		return p;
	}

	/* A validation report's preview: the first chat as the model sees it,
	 * its trained text highlighted (docs/datasets.md, Chat templates). */
	function previewEl(r) {
		if (!r || !r.preview || !Array.isArray(r.preview.segments))
			return null;
		return el('div', { class: 'chat-preview-box' },
			el('p', { class: 'small muted' }, 'Line ' + r.preview.line + ' of ' + (r.file || 'the file') + ' as the model sees it (chat template: ' +
				r.chat_template + '); highlighted: the text it is trained to write.'),
			el('pre', { class: 'chat-preview' }, r.preview.segments.map((s) => s.trained ? el('mark', { class: 'trained' }, s.text) : s.text)),
			r.preview.truncated ? el('p', { class: 'small muted' }, '… the rest of the chat is not shown.') : null);
	}

	function progressCell(p) {
		if (!p)
			return '–';
		const pct = p.total ? Math.round((100 * p.step) / p.total) : 0;
		return [el('progress', { max: p.total, value: p.step }), ' ', el('span', { class: 'small muted' }, pct + '%')];
	}

	function pageJobs(params) {
		const filter = params.get('status') || '';
		const select = el('select', { id: 'status-filter', on: {
			change: () => { location.hash = '#/jobs' + (select.value ? '?status=' + select.value : ''); },
		} }, el('option', { value: '' }, 'every status'), STATUSES.map((s) => el('option', { value: s, selected: s === filter }, s)));
		const tbody = el('tbody');
		const count = el('span', { class: 'muted' });
		const errs = el('div');
		append(clear(main), [
			el('div', { class: 'toolbar' }, el('h1', {}, 'Fine-tuning jobs'), el('span', { class: 'spacer' }),
				el('label', { for: 'status-filter' }, 'Status '), select,
				el('a', { class: 'button', href: '#/new' }, 'New job')),
			errs,
			el('table', { id: 'jobs', class: 'list' },
				el('thead', {}, el('tr', {}, ['Job', 'Status', 'Model', 'Suffix', 'Progress', 'Created'].map((h) => el('th', {}, h)))),
				tbody),
			count,
		]);
		return poller(async () => {
			const list = await A.call('GET', '/v1/fine_tuning/jobs?limit=100');
			const jobs = list.data.filter((j) => !filter || j.status === filter);
			const prog = await Promise.all(jobs.map((j) => jobProgress(j).catch(() => null)));
			const rows = jobs.map((j, i) => el('tr', { dataset: { jobId: j.id } },
				el('td', {}, jobLink(j.id)), el('td', {}, badge(j.status)),
				el('td', {}, j.fine_tuned_model || j.model), el('td', { class: 'suffix' }, j.user_provided_suffix || ''),
				el('td', {}, progressCell(prog[i])), el('td', {}, when(j.created_at))));
			append(clear(tbody), rows.length ? rows : [el('tr', {}, el('td', { colSpan: 6, class: 'muted' },
				filter ? 'No job is ' + filter + '.' : 'No jobs yet: create one.'))]);
			count.textContent = jobs.length + ' of ' + list.data.length + ' jobs shown' + (list.has_more ? ' (the newest 100)' : '');
		}, 2000, errs);
	}

	/* ---- #/job/<id> ---- */

	function stat(label, id) {
		return el('div', { class: 'stat' }, el('div', { class: 'label' }, label), el('div', { class: 'value', id: id }, '–'));
	}
	function chartBox(id, title) {
		const canvas = el('canvas', { id: id });
		const reset = el('button', { type: 'button', class: 'secondary small hidden' }, 'Reset zoom');
		const box = el('div', { class: 'chart-box' }, el('div', { class: 'chart-head' }, el('h3', {}, title),
			el('span', { class: 'spacer' }), reset), el('div', { class: 'chart-wrap' }, canvas));
		return { box, canvas, reset };
	}
	function memBars(planned, measured) {
		const top = Math.max(planned || 0, measured || 0) || 1;
		function bar(cls, v) {
			const b = el('div', { class: 'bar ' + cls });
			b.style.width = ((100 * (v || 0)) / top).toFixed(1) + '%';
			return el('div', { class: 'track' }, b);
		}
		const diff = planned && measured ? ((100 * (measured - planned)) / planned).toFixed(2) + '%' : '–';
		return el('div', { class: 'mem' },
			el('div', { class: 'mem-row' }, el('span', { class: 'label' }, 'planned'), bar('planned', planned), el('span', {}, C.bytes(planned))),
			el('div', { class: 'mem-row' }, el('span', { class: 'label' }, 'measured'), bar('measured', measured), el('span', {}, C.bytes(measured))),
			el('div', { class: 'small muted' }, 'measured against planned: ' + (measured ? (diff.startsWith('-') ? '' : '+') + diff : 'not yet')));
	}

	/* A job's method as the page names it: "supervised", "DPO, beta 0.1";
	 * null for a job object without one. */
	function methodText(job) {
		const m = job.method;
		if (!m || !m.type)
			return null;
		const hp = m.dpo && m.dpo.hyperparameters ? m.dpo.hyperparameters : {};
		return m.type === 'dpo' ? 'DPO' + (typeof hp.beta === 'number' ? ', beta ' + hp.beta : '') : m.type;
	}

	function pageJob(id) {
		const q = '/v1/fine_tuning/jobs/' + encodeURIComponent(id);
		const head = el('div', { class: 'toolbar' });
		const info = el('dl', { class: 'info', id: 'job-info' });
		const errs = el('div'); /* the poll's: cleared when it works again */
		const actErrs = el('div'); /* of a button, a download, the stream */
		const stats = el('div', { class: 'stats' }, stat('Step', 'st-step'), stat('Training loss', 'st-loss'),
			stat('Learning rate', 'st-lr'), stat('Tokens/s', 'st-tps'), stat('ETA', 'st-eta'));
		const mem = el('div', { id: 'job-memory' });
		const loss = chartBox('chart-loss', 'Loss');
		const acc = chartBox('chart-acc', 'Validation accuracy');
		const lr = chartBox('chart-lr', 'Learning rate');
		/* a dpo job's: shown, in place of the token accuracy, once the
		 * job or its first pair metrics say it is one */
		const racc = chartBox('chart-reward-acc', 'Reward accuracy');
		const rew = chartBox('chart-rewards', 'Rewards');
		racc.box.classList.add('hidden');
		rew.box.classList.add('hidden');
		const chartRow = el('div', { class: 'charts' }, loss.box, acc.box, racc.box, rew.box, lr.box);
		const ckpts = el('div', { id: 'checkpoints' });
		/* GGUF for llama.cpp (docs/gguf.md): the type the GGUF buttons
		 * of the checkpoints ask for, and the job's files */
		const ggufType = el('select', { id: 'gguf-type' }, ['q8_0', 'f16', 'bf16'].map((t) => el('option', { value: t }, t)));
		const ggufs = el('div', { id: 'gguf' });
		const log = el('tbody');
		const dataPreview = el('section', { class: 'card wide hidden', id: 'job-preview' });
		/* evaluation's answers (eval_samples): a table an evaluation,
		 * the newest first and open */
		const samplesList = el('div', { id: 'samples-list' });
		const samplesBox = el('section', { class: 'card wide hidden', id: 'job-samples' }, el('h2', {}, 'Evaluation samples'),
			el('p', { class: 'small muted' }, 'The model\'s greedy answers to the first validation chats at each evaluation, beside the reference answers.'), samplesList);
		append(clear(main), [head, errs, actErrs, el('div', { class: 'cols' }, el('section', { class: 'card' }, el('h2', {}, 'Job'), info),
			el('section', { class: 'card' }, el('h2', {}, 'Progress'), stats, el('h3', {}, 'Memory'), mem)),
		el('p', { class: 'small muted' }, 'Hover a chart for its values; drag across one to zoom into those steps, double-click or Reset zoom to see them all.'),
		chartRow,
		el('div', { class: 'cols' }, el('section', { class: 'card' }, el('h2', {}, 'Checkpoints'), ckpts,
			el('h3', {}, 'GGUF for llama.cpp'), el('p', { class: 'small muted' }, el('label', {}, 'Type ', ggufType),
				' — a GGUF button converts that model in tacod; the file is listed here to download.'), ggufs),
			el('section', { class: 'card wide' }, el('h2', {}, 'Events'), el('div', { class: 'log' },
				el('table', { id: 'events', class: 'list small' }, el('thead', {}, el('tr', {}, el('th', {}, 'Time'), el('th', {}, 'Level'), el('th', {}, 'Message'))), log)))),
		samplesBox, dataPreview]);

		const lossChart = C.lineChart(loss.canvas, [{ label: 'training loss' }, { label: 'validation loss', points: true }], { yTitle: 'cross-entropy' });
		const accChart = C.lineChart(acc.canvas, [{ label: 'token accuracy', points: true, color: '#16a34a' },
			{ label: 'multiple-choice accuracy', points: true, color: '#9333ea' },
			{ label: 'exact match', points: true, color: '#2563eb' }],
		{ yMin: 0, yMax: 1, format: (v) => (100 * v).toFixed(2) + '%' });
		const lrChart = C.lineChart(lr.canvas, [{ label: 'learning rate', color: '#ea580c' }], { format: (v) => v.toExponential(3) });
		/* TRL's metrics: the share of pairs whose chosen output gained the
		 * more log-probability, and the implicit rewards beta (logp - ref) */
		const raccChart = C.lineChart(racc.canvas, [{ label: 'training pairs', color: '#16a34a' },
			{ label: 'validation pairs', points: true, color: '#0d9488' }],
		{ yMin: 0, yMax: 1, format: (v) => (100 * v).toFixed(1) + '%' });
		const rewChart = C.lineChart(rew.canvas, [{ label: 'chosen', color: '#2563eb' }, { label: 'rejected', color: '#dc2626' },
			{ label: 'margin', color: '#16a34a' }, { label: 'validation chosen', points: true, color: '#1e40af' },
			{ label: 'validation rejected', points: true, color: '#b91c1c' }, { label: 'validation margin', points: true, color: '#65a30d' }],
		{ yTitle: 'beta (logp - ref)', format: (v) => v.toFixed(4) });
		const charts = [lossChart, accChart, raccChart, rewChart, lrChart];
		let dpoShown = false;
		function showDpo() {
			if (dpoShown)
				return;
			dpoShown = true;
			acc.box.classList.add('hidden');
			racc.box.classList.remove('hidden');
			rew.box.classList.remove('hidden');
			chartRow.classList.add('dpo'); /* four charts, two a row */
			lossChart.options.scales.y.title.text = 'DPO loss';
			lossChart.update('none');
		}
		for (const [box, chart] of [[loss, lossChart], [acc, accChart], [racc, raccChart], [rew, rewChart], [lr, lrChart]]) {
			chart.$onZoom = (z) => box.reset.classList.toggle('hidden', !z);
			box.reset.addEventListener('click', () => C.setRange(chart, null, null));
		}

		let job = null, last = null, dirty = false, ckptShown = '';
		const logRows = [];
		function renderHead() {
			const s = job.status;
			const act = (label, what, ok) => el('button', { type: 'button', id: 'job-' + what, disabled: !ok, class: what === 'cancel' ? 'danger' : '',
				on: { click: async () => {
					clear(actErrs);
					try {
						job = await A.call('POST', q + '/' + what);
						renderJob();
					} catch (e) {
						append(actErrs, errorBox(e));
					}
				} } }, label);
			append(clear(head), [el('h1', {}, el('span', { class: 'mono' }, job.id)), badge(s), el('span', { class: 'spacer' }),
				act('Pause', 'pause', ['queued', 'running'].includes(s)), act('Resume', 'resume', s === 'paused'),
				act('Cancel', 'cancel', !FINAL.includes(s))]);
		}
		let headFor = '';
		function renderJob() {
			/* the buttons are made anew only when the status changes, not
			 * under a user's pointer every poll */
			if (job.method && job.method.type === 'dpo')
				showDpo();
			if (headFor !== job.status) {
				headFor = job.status;
				renderHead();
			}
			const rows = [['Model', job.model], ['Fine-tuned model', job.fine_tuned_model], ['Method', methodText(job)],
				['Suffix', job.user_provided_suffix], ['Created', when(job.created_at)], ['Finished', job.finished_at ? when(job.finished_at) : null],
				['Training file', job.training_file], ['Validation file', job.validation_file],
				['Trained tokens', job.trained_tokens]];
			const meta = Object.entries(job.metadata || {});
			append(clear(info), rows.filter((r) => r[1] !== null && r[1] !== undefined && r[1] !== '')
				.map((r) => [el('dt', {}, r[0]), el('dd', { class: r[0] === 'Suffix' ? 'suffix' : '', id: r[0] === 'Method' ? 'job-method' : null }, String(r[1]))]),
			meta.length ? [el('dt', {}, 'Metadata'), el('dd', { class: 'metadata' }, meta.map(([k, v]) =>
				el('div', { class: 'meta-pair' }, el('span', { class: 'meta-key' }, k), ': ', el('span', { class: 'meta-value' }, v))))] : null,
			job.error && job.error.message ? [el('dt', {}, 'Error'), el('dd', { class: 'error' }, job.error.message)] : null);
			append(clear(mem), [memBars(job.planned_memory_bytes, last && last.mem_peak_bytes ? last.mem_peak_bytes : job.measured_peak_memory_bytes)]);
			const eta = document.getElementById('st-eta');
			if (FINAL.includes(job.status))
				eta.textContent = job.status === 'succeeded' ? 'done' : '–';
			else
				eta.textContent = job.estimated_finish ? duration(job.estimated_finish - Date.now() / 1000) : '–';
		}
		async function renderCheckpoints() {
			const list = await A.call('GET', q + '/checkpoints?limit=100');
			const key = job.status + list.data.map((c) => c.id).join(',');
			if (key === ckptShown)
				return;
			ckptShown = key;
			const dl = (label, path, name) => el('button', { type: 'button', class: 'secondary small download', dataset: { file: name }, on: { click: () =>
				A.download(path, name).catch((e) => append(clear(actErrs), errorBox(e))) } }, label);
			/* POST .../gguf: the list shows the conversion from the next
			 * poll on */
			const gguf = (source, checkpoint) => el('button', { type: 'button', class: 'secondary small gguf-convert', dataset: { source },
				on: { click: async () => {
					clear(actErrs);
					try {
						await A.call('POST', q + '/gguf', { type: ggufType.value, checkpoint });
						await renderGguf();
					} catch (e) {
						append(actErrs, errorBox(e));
					}
				} } }, 'GGUF');
			const items = list.data.map((c) => el('li', {}, 'step ' + c.step_number + ' ', el('span', { class: 'mono small' }, c.id), ' ',
				dl('Download', q + '/checkpoints/' + encodeURIComponent(c.id) + '/content', c.id + '.tar'), ' ', gguf(c.id, c.id)));
			if (job.status === 'succeeded')
				items.unshift(el('li', {}, 'final model ', el('span', { class: 'mono small' }, job.fine_tuned_model || ''), ' ',
					dl('Download', q + '/model/content', job.id + '-model.tar'), ' ', gguf('model', null)));
			append(clear(ckpts), items.length ? el('ul', { class: 'plain' }, items) : el('p', { class: 'muted' }, 'None yet.'));
		}
		let ggufShown = '';
		async function renderGguf() {
			const list = await A.call('GET', q + '/gguf?limit=100');
			const key = JSON.stringify(list.data.map((g) => [g.id, g.status, g.bytes]));
			if (key === ggufShown)
				return;
			ggufShown = key;
			const file = (g) => job.id.replace(/^ftjob-/, '') + '-' + g.id;
			const items = list.data.map((g) => el('li', { dataset: { gguf: g.id, status: g.status } }, el('span', { class: 'mono small' }, g.id), ' ',
				badge(g.status), ' ',
				g.status === 'succeeded' ? [C.bytes(g.bytes), ' ', el('button', { type: 'button', class: 'secondary small download', dataset: { file: file(g) },
					on: { click: () => A.download(g.download_url, file(g)).catch((e) => append(clear(actErrs), errorBox(e))) } }, 'Download')] : null,
				g.error ? el('span', { class: 'error small' }, g.error.message) : null));
			append(clear(ggufs), items.length ? el('ul', { class: 'plain' }, items) : el('p', { class: 'muted' }, 'None yet.'));
		}
		/* a dpo job's pair metrics (TRL's names, prefix '' or 'val_') into
		 * the reward accuracy's series acc and the rewards' from rew on */
		function addPairs(d, prefix, acc, rew) {
			if (typeof d[prefix + 'rewards/accuracies'] !== 'number')
				return;
			showDpo();
			C.add(raccChart, acc, d.step, d[prefix + 'rewards/accuracies']);
			['chosen', 'rejected', 'margins'].forEach((k, i) => C.add(rewChart, rew + i, d.step, d[prefix + 'rewards/' + k]));
		}
		function addSamples(d) {
			for (const open of samplesList.querySelectorAll('details'))
				open.open = false;
			const rows = d.samples.map((s) => el('tr', { class: s.match ? 'match' : 'miss', dataset: { line: String(s.line) } },
				el('td', { class: 'prompt' }, s.prompt), el('td', { class: 'reference' }, s.reference),
				el('td', { class: 'answer' }, s.answer), el('td', { class: 'match' }, s.match ? 'yes' : 'no')));
			const pct = typeof d.val_exact_match === 'number' ? (100 * d.val_exact_match).toFixed(1) + '%' : '–';
			samplesList.prepend(el('details', { open: true, dataset: { step: String(d.step) } },
				el('summary', {}, 'step ' + d.step + ': exact match ' + pct),
				el('table', { class: 'list small samples' }, el('thead', {}, el('tr', {}, el('th', {}, 'Prompt'), el('th', {}, 'Reference'),
					el('th', {}, 'Answer'), el('th', {}, 'Match'))), el('tbody', {}, rows))));
			samplesBox.classList.remove('hidden');
		}
		function onEvent(ev) {
			const d = ev.data || {};
			/* the training file's report: its first chat as rendered */
			const report = ev.type === 'validated' ? d : d.validation;
			if (report && report.preview && !dataPreview.dataset.shown) {
				append(clear(dataPreview), [el('h2', {}, 'Training data'), previewEl(report)]);
				dataPreview.classList.remove('hidden');
				dataPreview.dataset.shown = '1';
			}
			if (ev.type === 'metrics' && d.event === 'eval') {
				C.add(lossChart, 1, d.step, d.val_loss);
				addPairs(d, 'val_', 1, 3);
				C.add(accChart, 0, d.step, d.val_token_accuracy);
				C.add(accChart, 1, d.step, d.mc_accuracy);
				C.add(accChart, 2, d.step, d.val_exact_match);
				if (Array.isArray(d.samples) && d.samples.length)
					addSamples(d);
			} else if (ev.type === 'metrics' && typeof d.step === 'number') {
				C.add(lossChart, 0, d.step, d.train_loss);
				C.add(lrChart, 0, d.step, d.learning_rate);
				addPairs(d, '', 0, 0);
				last = d;
				document.getElementById('st-step').textContent = d.step + ' / ' + d.total_steps;
				document.getElementById('st-loss').textContent = num(d.train_loss, 4);
				document.getElementById('st-lr').textContent = typeof d.learning_rate === 'number' ? d.learning_rate.toExponential(3) : '–';
				document.getElementById('st-tps').textContent = typeof d.tokens_per_s === 'number' ? Math.round(d.tokens_per_s).toLocaleString('en') : '–';
			} else if (d.event === 'reference' && !last) {
				/* a dpo job's reference pass, before its first step */
				showDpo();
				document.getElementById('st-step').textContent = 'reference (' + d.set + ') ' + d.pairs + ' / ' + d.total_pairs + ' pairs';
			}
			logRows.push(el('tr', { class: 'lv-' + (['info', 'warn', 'error'].includes(ev.level) ? ev.level : 'info') },
				el('td', { class: 'nowrap' }, when(ev.created_at)), el('td', {}, ev.level), el('td', {}, ev.message)));
			dirty = true;
		}
		/* charts and log redrawn at most every 250 ms, not per event */
		const flush = setInterval(() => {
			if (!dirty)
				return;
			dirty = false;
			for (const c of charts)
				C.refresh(c);
			while (logRows.length) {
				log.insertBefore(logRows.shift(), log.firstChild);
				if (log.childNodes.length > 1000)
					log.removeChild(log.lastChild);
			}
		}, 250);
		const stream = A.streamEvents(id, (ev) => {
			if (actErrs.firstChild && actErrs.firstChild.dataset.stream)
				clear(actErrs);
			onEvent(ev);
		}, null, (e) => {
			const b = errorBox('events: ' + errorText(e));
			b.dataset.stream = '1';
			append(clear(actErrs), b);
		});
		const poll = poller(async () => {
			job = await A.call('GET', q);
			renderJob();
			await renderCheckpoints();
			await renderGguf();
		}, 2000, errs);
		return { stop() {
			stream.stop();
			poll.stop();
			clearInterval(flush);
			for (const c of charts)
				c.destroy();
		} };
	}

	/* ---- #/new ---- */

	const uploaded = new Map(); /* name/size/mtime -> file id */

	async function fileId(input, status) {
		const f = input.files && input.files[0];
		if (!f)
			return null;
		const key = f.name + '\0' + f.size + '\0' + f.lastModified;
		if (!uploaded.has(key)) {
			status.textContent = 'Uploading ' + f.name + '…';
			const r = await A.upload(f);
			uploaded.set(key, r.id);
		}
		return uploaded.get(key);
	}

	function field(label, input, hint) {
		return el('div', { class: 'field' }, el('label', { for: input.id }, label), input, hint ? el('span', { class: 'small muted' }, hint) : null);
	}
	function numInput(id, placeholder, step) {
		return el('input', { type: 'number', id: id, placeholder: placeholder || '', step: step || 'any', min: '0' });
	}

	function pageNew() {
		const train = el('input', { type: 'file', id: 'train-file', accept: '.jsonl,application/jsonl,application/x-ndjson' });
		const val = el('input', { type: 'file', id: 'val-file', accept: '.jsonl,application/jsonl,application/x-ndjson' });
		const model = el('select', { id: 'model' });
		/* OpenAI's method: supervised on examples, dpo on preference pairs */
		const method = el('select', { id: 'opt-method' }, el('option', { value: 'supervised' }, 'Supervised'),
			el('option', { value: 'dpo' }, 'DPO (preference pairs)'));
		const beta = numInput('opt-beta', 'auto (0.1)');
		const betaField = field('DPO beta', beta, 'in (0, 100]');
		betaField.classList.add('hidden');
		method.addEventListener('change', () => betaField.classList.toggle('hidden', method.value !== 'dpo'));
		const o = {
			epochs: numInput('opt-epochs', 'auto', '1'), batch: numInput('opt-batch', 'auto', '1'), lrm: numInput('opt-lrm', 'auto'),
			steps: numInput('opt-steps', 'from epochs', '1'), lr: numInput('opt-lr', 'from multiplier'), seq: numInput('opt-seq', 'model default', '1'),
			evalEvery: numInput('opt-eval-every', 'default', '1'), logEvery: numInput('opt-log-every', 'default', '1'),
			ckptEvery: numInput('opt-ckpt-every', 'default', '1'), seed: numInput('opt-seed', 'random', '1'),
		};
		const suffix = el('input', { type: 'text', id: 'opt-suffix', maxLength: 64, autocomplete: 'off' });
		const metadata = el('textarea', { id: 'opt-metadata', rows: 3, placeholder: 'key=value, one a line' });
		const status = el('p', { id: 'new-status', class: 'muted' });
		const plan = el('div', { id: 'plan' });
		const planBtn = el('button', { type: 'button', id: 'plan-button', class: 'secondary' }, 'Check the plan');
		const createBtn = el('button', { type: 'button', id: 'create-button' }, 'Create job');
		let planChart = null;

		append(clear(main), [el('h1', {}, 'New fine-tuning job'), el('div', { class: 'cols' },
			el('section', { class: 'card' }, el('h2', {}, 'Data and model'),
				field('Training file (JSONL)', train), field('Validation file (optional)', val), field('Base model', model),
				field('Method', method), betaField,
				el('h2', {}, 'Options'),
				el('div', { class: 'grid' }, field('Epochs', o.epochs), field('Batch size', o.batch), field('LR multiplier', o.lrm, 'lr = the auto rate (docs/taco.md) × this'),
					field('Steps', o.steps), field('Learning rate', o.lr), field('Sequence length', o.seq),
					field('Eval every', o.evalEvery), field('Log every', o.logEvery), field('Checkpoint every', o.ckptEvery), field('Seed', o.seed)),
				field('Suffix', suffix), field('Metadata', metadata),
				el('div', { class: 'buttons' }, planBtn, createBtn), status),
			el('section', { class: 'card wide' }, el('h2', {}, 'Memory plan and data report'), plan,
				el('p', { class: 'muted small', id: 'plan-hint' }, 'Check the plan to see the memory it needs, term by term, and the validation report of the data; nothing is created.')))]);

		// the base models, then the user's fine-tuned ones (a job starts
		// from those weights: docs/tacod.md, "Models")
		A.call('GET', '/v1/models').then((r) => {
			const opt = (m) => el('option', { value: m.id, title: m.parent ? 'from ' + m.parent : m.id }, m.id);
			const tuned = r.data.filter((m) => m.parent);
			append(clear(model), r.data.filter((m) => !m.parent).map(opt),
				tuned.length ? el('optgroup', { label: 'Fine-tuned' }, tuned.map(opt)) : null);
		}).catch((e) => append(status, [errorBox(e)]));

		async function body() {
			const b = { model: model.value, training_file: await fileId(train, status) };
			if (!b.training_file)
				throw new Error('Choose a training file.');
			const v = await fileId(val, status);
			if (v)
				b.validation_file = v;
			const hp = {}, taco = {};
			const n = (i) => (i.value === '' ? null : Number(i.value));
			if (n(o.epochs) !== null) hp.n_epochs = n(o.epochs);
			if (n(o.batch) !== null) hp.batch_size = n(o.batch);
			if (n(o.lrm) !== null) hp.learning_rate_multiplier = n(o.lrm);
			if (n(o.steps) !== null) taco.steps = n(o.steps);
			if (n(o.lr) !== null) taco.lr = n(o.lr);
			if (n(o.seq) !== null) taco.seq_len = n(o.seq);
			if (n(o.evalEvery) !== null) taco.eval_every = n(o.evalEvery);
			if (n(o.logEvery) !== null) taco.log_every = n(o.logEvery);
			if (n(o.ckptEvery) !== null) taco.checkpoint_every = n(o.ckptEvery);
			if (n(o.seed) !== null) b.seed = n(o.seed);
			if (method.value === 'dpo') {
				/* the hyperparameters inside the method, as OpenAI's
				 * clients send them for dpo */
				if (n(beta) !== null) hp.beta = n(beta);
				b.method = { type: 'dpo', dpo: { hyperparameters: hp } };
			} else if (Object.keys(hp).length)
				b.hyperparameters = hp;
			if (Object.keys(taco).length) b.taco = taco;
			if (suffix.value) b.suffix = suffix.value;
			const md = {};
			for (const line of metadata.value.split('\n')) {
				const i = line.indexOf('=');
				if (line.trim() === '')
					continue;
				if (i <= 0)
					throw new Error('Metadata: "' + line + '" is not key=value.');
				md[line.slice(0, i).trim()] = line.slice(i + 1);
			}
			if (Object.keys(md).length) b.metadata = md;
			return b;
		}

		function renderPlan(p) {
			if (planChart) {
				planChart.destroy();
				planChart = null;
			}
			const canvas = el('canvas', { id: 'plan-bar' });
			const terms = Object.entries(p.terms || {}).filter(([, v]) => v > 0);
			const report = p.validation;
			append(clear(plan), [
				el('p', { class: p.fits ? 'ok' : 'error', id: 'plan-fits' }, p.fits ? 'Fits: ' : 'Does not fit: ',
					C.bytes(p.total_bytes) + ' planned of ' + C.bytes(p.device_memory_bytes) + ' device memory' +
					(p.host_bytes ? ', ' + C.bytes(p.host_bytes) + ' host memory' : '') + (p.peak_phase ? ' (peak: ' + p.peak_phase + ')' : '')),
				p.settings ? el('p', { class: 'muted', id: 'plan-settings' }, 'Settings: precision ' + p.settings.precision +
					', activation offload ' + (p.settings.activation_offload ? 'on' : 'off') + ', ' + p.settings.mlp_chunks + ' MLP block(s)' +
					(p.settings.streamed_layers ? ', weights of ' + p.settings.streamed_layers + ' of ' + p.settings.layers +
						' layers streamed from host memory (' + C.bytes(p.transfer.to_device_bytes_per_step) + ' to the device and ' +
						C.bytes(p.transfer.to_host_bytes_per_step) + ' back per step)' : '')) : null,
				el('div', { class: 'plan-bar-wrap' }, canvas),
				el('table', { class: 'list small', id: 'plan-terms' }, el('tbody', {}, terms.map(([k, v]) =>
					el('tr', {}, el('td', {}, k), el('td', { class: 'num' }, C.bytes(v)), el('td', { class: 'num muted' }, (100 * v / p.total_bytes).toFixed(1) + '%'))))),
				p.advice ? el('div', { class: 'advice' }, el('h3', {}, 'What would fit'), el('ul', {}, Object.entries(p.advice).map(([k, v]) =>
					el('li', {}, k + ': ' + (typeof v === 'object' ? JSON.stringify(v) : String(v)))))) : null,
				p.error ? el('p', { class: 'error' }, p.error.message || JSON.stringify(p.error)) : null,
				p.note ? el('p', { class: 'muted' }, p.note) : null,
				report ? el('div', { id: 'plan-report' }, el('h3', {}, 'Training data'), el('p', {}, report.summary),
					el('table', { class: 'list small' }, el('tbody', {}, ['lines', 'examples', 'pairs', 'kept', 'tokens', 'trainable_tokens', 'truncated', 'dropped', 'errors', 'warnings']
						.filter((k) => k !== 'pairs' || report.pairs !== undefined).map((k) => el('tr', {}, el('td', {}, k.replace('_', ' ')), el('td', { class: 'num' }, String(report[k] ?? '–')))))),
					report.problems && report.problems.length ? el('table', { class: 'list small' },
						el('thead', {}, el('tr', {}, ['Line', 'Severity', 'Code', 'Detail'].map((h) => el('th', {}, h)))),
						el('tbody', {}, report.problems.map((x) => el('tr', {}, el('td', {}, x.line), el('td', {}, x.severity), el('td', {}, x.code), el('td', {}, x.detail))))) : null,
					previewEl(report))
					: el('p', { class: 'muted' }, 'No validation report' + (p.validated === false ? ' (the data was not read: see the note).' : '.')),
			]);
			planChart = C.planBar(canvas, Object.fromEntries(terms), p.device_memory_bytes);
		}

		planBtn.addEventListener('click', async () => {
			status.textContent = '';
			try {
				const b = await body();
				status.textContent = 'Planning…';
				renderPlan(await A.call('POST', '/v1/fine_tuning/plan', b));
				status.textContent = '';
			} catch (e) {
				append(clear(status), [errorBox(e)]);
			}
		});
		createBtn.addEventListener('click', async () => {
			status.textContent = '';
			createBtn.disabled = true;
			try {
				const b = await body();
				status.textContent = 'Creating…';
				const j = await A.call('POST', '/v1/fine_tuning/jobs', b);
				location.hash = '#/job/' + encodeURIComponent(j.id);
			} catch (e) {
				append(clear(status), [errorBox(e)]);
				if (e instanceof A.ApiError && e.body && e.body.error && e.body.error.code === 'insufficient_memory')
					planBtn.click();
			} finally {
				createBtn.disabled = false;
			}
		});
		return { stop() { if (planChart) planChart.destroy(); } };
	}

	/* ---- #/device ---- */

	function pageDevice() {
		const box = el('div', { id: 'device' });
		const errs = el('div');
		append(clear(main), [el('h1', {}, 'Device'), errs, box]);
		return poller(async () => {
			const d = await A.call('GET', '/v1/device');
			const devs = d.devices || [];
			const total = d.memory_total || 1;
			const seg = (cls, v) => {
				/* a job's few MB of a GPU's many GB still shows */
				const s = el('div', { class: 'seg ' + cls + (v > 0 ? ' some' : '') });
				s.style.width = Math.min(100, (100 * v) / total).toFixed(2) + '%';
				return s;
			};
			append(clear(box), [
				el('section', { class: 'card' }, el('h2', {}, d.name), el('p', {}, el('span', { class: 'badge backend' }, d.backend),
					d.backend === 'cuda' ? ' GPU' : ' CPU (host memory)'),
				el('h3', {}, 'Memory'),
				el('div', { class: 'gauge', id: 'gauge' }, seg('planned', d.memory_planned), seg('used', d.memory_used)),
				el('div', { class: 'legend' }, el('span', { class: 'key planned' }), 'planned ' + C.bytes(d.memory_planned), '  ',
					el('span', { class: 'key used' }), 'used ' + C.bytes(d.memory_used), '  ', 'of ' + C.bytes(d.memory_total) +
					' (' + (100 * d.memory_planned / total).toFixed(2) + '% planned)')),
				/* several GPUs (tacod.json devices): each with its memory and jobs (and its name with "auto") */
				devs.length > 1 ? el('section', { class: 'card' }, el('h2', {}, 'GPUs'),
					el('table', { class: 'list', id: 'gpus' }, el('thead', {}, el('tr', {}, ['GPU', 'Memory', 'Planned', 'Used', 'Jobs'].map((h) => el('th', {}, h)))),
						el('tbody', {}, devs.map((g) => el('tr', { dataset: { gpu: String(g.index) } }, el('td', {}, String(g.index), g.name ? ' ' + g.name : null), el('td', { class: 'num' }, C.bytes(g.memory_total)),
							el('td', { class: 'num' }, C.bytes(g.memory_planned)), el('td', { class: 'num' }, C.bytes(g.memory_used)),
							el('td', {}, g.running_jobs.map((id) => [jobLink(id), ' ']))))))) : null,
				el('section', { class: 'card' }, el('h2', {}, 'Jobs'),
					el('p', {}, d.running_jobs.length + ' running, ' + d.queued_jobs + ' queued, ' + d.paused_jobs + ' paused'),
					el('table', { class: 'list', id: 'running' }, el('thead', {}, el('tr', {}, ['Running job', 'GPU', 'Planned', 'Peak', 'Tokens/s'].map((h) => el('th', {}, h)))),
						el('tbody', {}, d.running_jobs.map((j) => el('tr', {}, el('td', {}, jobLink(j.id)), el('td', {}, (j.devices || []).map((g) => g === null ? '–' : String(g)).join(', ')),
							el('td', { class: 'num' }, C.bytes(j.planned_bytes)),
							el('td', { class: 'num' }, C.bytes(j.peak_bytes)), el('td', { class: 'num' }, j.tokens_per_s ? Math.round(j.tokens_per_s).toLocaleString('en') : '–')))))),
			]);
		}, 2000, errs);
	}

	/* ---- #/playground: a model's answers, or two models' side by side ---- */

	function pagePlayground() {
		const errs = el('div');
		const pick = (id) => el('select', { id }, []);
		const m1 = pick('pg-model-1'), m2 = pick('pg-model-2');
		const compare = el('input', { type: 'checkbox', id: 'pg-compare' });
		const prompt = el('textarea', { id: 'pg-prompt', rows: 3, placeholder: 'A message to the model' });
		const temp = el('input', { type: 'number', id: 'pg-temperature', min: 0, max: 2, step: 0.1, value: 0 });
		const maxTok = el('input', { type: 'number', id: 'pg-max-tokens', min: 1, max: 4096, value: 128 });
		const send = el('button', { type: 'button', id: 'pg-send' }, 'Send');
		const clearBtn = el('button', { type: 'button', id: 'pg-clear', class: 'secondary' }, 'New chat');
		const col = (n) => el('section', { class: 'card pg-col', id: 'pg-col-' + n }, el('h2', { class: 'pg-title' }), el('div', { class: 'pg-log' }));
		const cols = [col(1), col(2)];
		cols[1].classList.add('hidden');
		/* each column's conversation: the messages sent and answered */
		let chats = [[], []], ctrl = null;
		append(clear(main), [el('h1', {}, 'Playground'), errs,
			el('p', { class: 'small muted' }, 'Chat with a base or fine-tuned model (POST /v1/chat/completions); compare two on the same messages. For trying models, not serving them.'),
			el('section', { class: 'card' }, el('div', { class: 'pg-controls' }, el('label', {}, 'Model ', m1),
				el('label', {}, compare, ' compare with '), m2, el('label', {}, 'Temperature ', temp), el('label', {}, 'Max tokens ', maxTok)),
			prompt, el('div', { class: 'pg-buttons' }, send, clearBtn)),
			el('div', { class: 'cols' }, cols[0], cols[1])]);
		compare.addEventListener('change', () => cols[1].classList.toggle('hidden', !compare.checked));
		function bubble(role, text) {
			return el('div', { class: 'pg-msg ' + role }, el('span', { class: 'pg-role' }, role), el('pre', { class: 'pg-text' }, text));
		}
		clearBtn.addEventListener('click', () => {
			chats = [[], []];
			for (const c of cols)
				clear(c.querySelector('.pg-log'));
		});
		async function ask(i, model, text) {
			const log = cols[i].querySelector('.pg-log');
			cols[i].querySelector('.pg-title').textContent = model;
			chats[i].push({ role: 'user', content: text });
			log.appendChild(bubble('user', text));
			const out = bubble('assistant', '');
			out.dataset.state = 'streaming';
			log.appendChild(out);
			const pre = out.querySelector('.pg-text');
			let answer = '';
			try {
				const finish = await A.chat({ model, messages: chats[i], temperature: Number(temp.value),
					max_tokens: Number(maxTok.value) }, (t) => { answer += t; pre.textContent = answer; }, ctrl.signal);
				out.dataset.state = 'done';
				out.dataset.finish = finish || '';
			} catch (e) {
				out.dataset.state = 'error';
				out.appendChild(errorBox(e));
			}
			chats[i].push({ role: 'assistant', content: answer });
		}
		send.addEventListener('click', async () => {
			const text = prompt.value.trim();
			if (!text || !m1.value)
				return;
			clear(errs);
			send.disabled = true;
			ctrl = new AbortController();
			const jobs = [ask(0, m1.value, text)];
			if (compare.checked && m2.value)
				jobs.push(ask(1, m2.value, text));
			await Promise.all(jobs);
			prompt.value = '';
			send.disabled = false;
		});
		A.call('GET', '/v1/models').then((list) => {
			const names = list.data.map((m) => m.id);
			for (const s of [m1, m2])
				append(clear(s), names.map((n) => el('option', { value: n }, n)));
			const want = new URLSearchParams(location.hash.split('?')[1] || '').get('model');
			if (want && names.includes(want))
				m1.value = want;
		}).catch((e) => append(errs, errorBox(e)));
		return { stop() { if (ctrl) ctrl.abort(); } };
	}

	/* ---- the router ---- */

	function route() {
		if (page)
			page.stop();
		page = null;
		const h = location.hash.replace(/^#/, '') || '/jobs';
		const [path, query] = h.split('?');
		const params = new URLSearchParams(query || '');
		const parts = path.split('/').filter(Boolean);
		for (const n of ['jobs', 'new', 'playground', 'device'])
			document.getElementById('nav-' + n).classList.toggle('active', parts[0] === n || (n === 'jobs' && parts[0] === 'job'));
		if (parts[0] === 'job' && parts[1])
			page = pageJob(decodeURIComponent(parts[1]));
		else if (parts[0] === 'new')
			page = pageNew();
		else if (parts[0] === 'device')
			page = pageDevice();
		else if (parts[0] === 'playground')
			page = pagePlayground();
		else
			page = pageJobs(params);
	}
	window.addEventListener('hashchange', route);
	route();
})();
