/* charts.js: the dashboard's charts on Chart.js 3.9 (Debian's
 * libjs-chart.js, built into tacod): line charts over steps that grow as
 * events arrive, with hover values and a zoom by range selection (Chart.js
 * 3.9 has no zoom of its own and chartjs-plugin-zoom is not packaged in
 * Debian: a drag across a chart sets its step range, a double-click or
 * "Reset zoom" shows every step again), and a stacked bar of the memory
 * plan's terms. Exposes window.TacoCharts. */
'use strict';
(function () {
	const palette = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04',
		'#db2777', '#4b5563', '#65a30d', '#7c3aed', '#0d9488', '#b91c1c', '#1e40af'];

	function bytes(n) {
		if (n === null || n === undefined)
			return '–';
		const u = ['B', 'KB', 'MB', 'GB', 'TB'];
		let i = 0, v = Number(n);
		while (Math.abs(v) >= 1000 && i < u.length - 1) {
			v /= 1000;
			i++;
		}
		return (i ? v.toFixed(v < 10 ? 2 : 1) : String(v)) + ' ' + u[i];
	}

	/* The y range of the points whose x lies in [lo, hi], for a zoomed
	 * chart (Chart.js scales y over every point otherwise). */
	function yRange(chart, lo, hi) {
		let min = Infinity, max = -Infinity;
		for (const ds of chart.data.datasets)
			for (const p of ds.data)
				if (p.x >= lo && p.x <= hi) {
					min = Math.min(min, p.y);
					max = Math.max(max, p.y);
				}
		if (min === Infinity)
			return null;
		const pad = (max - min) * 0.05 || Math.abs(max) * 0.05 || 0.01;
		return [min - pad, max + pad];
	}

	function setRange(chart, lo, hi) {
		const x = chart.options.scales.x, y = chart.options.scales.y;
		if (lo === null) {
			delete x.min;
			delete x.max;
			delete y.min;
			delete y.max;
			chart.$zoomed = false;
		} else {
			x.min = lo;
			x.max = hi;
			const r = yRange(chart, lo, hi);
			if (r) {
				y.min = r[0];
				y.max = r[1];
			}
			chart.$zoomed = true;
		}
		chart.update('none');
		if (chart.$onZoom)
			chart.$onZoom(chart.$zoomed);
	}

	/* Drag across the chart to select a step range. */
	function rangeZoom(chart, canvas) {
		const box = canvas.parentNode;
		const sel = document.createElement('div');
		sel.className = 'zoom-selection hidden';
		box.appendChild(sel);
		let x0 = null;
		function px(ev) {
			const r = canvas.getBoundingClientRect();
			return Math.min(Math.max(ev.clientX - r.left, chart.chartArea.left), chart.chartArea.right);
		}
		canvas.addEventListener('mousedown', (ev) => {
			if (ev.button !== 0 || !chart.chartArea)
				return;
			x0 = px(ev);
			sel.style.left = x0 + 'px';
			sel.style.width = '0px';
			sel.style.top = chart.chartArea.top + 'px';
			sel.style.height = (chart.chartArea.bottom - chart.chartArea.top) + 'px';
			sel.classList.remove('hidden');
			ev.preventDefault();
		});
		window.addEventListener('mousemove', (ev) => {
			if (x0 === null)
				return;
			const x = px(ev);
			sel.style.left = Math.min(x0, x) + 'px';
			sel.style.width = Math.abs(x - x0) + 'px';
		});
		window.addEventListener('mouseup', (ev) => {
			if (x0 === null)
				return;
			const x = px(ev);
			sel.classList.add('hidden');
			const a = Math.min(x0, x), b = Math.max(x0, x);
			x0 = null;
			if (b - a < 5)
				return;
			const sx = chart.scales.x;
			setRange(chart, sx.getValueForPixel(a), sx.getValueForPixel(b));
		});
		canvas.addEventListener('dblclick', () => setRange(chart, null, null));
	}

	/* A line chart of series [{label, axis?}] over steps. */
	function lineChart(canvas, series, opts) {
		opts = opts || {};
		const scales = {
			x: { type: 'linear', title: { display: true, text: 'step' }, ticks: { precision: 0 } },
			y: { type: opts.yType || 'linear', title: { display: !!opts.yTitle, text: opts.yTitle || '' } },
		};
		if (opts.yMin !== undefined)
			scales.y.suggestedMin = opts.yMin;
		if (opts.yMax !== undefined)
			scales.y.suggestedMax = opts.yMax;
		const chart = new Chart(canvas, {
			type: 'line',
			data: {
				datasets: series.map((s, i) => ({
					label: s.label,
					data: [],
					borderColor: s.color || palette[i],
					backgroundColor: s.color || palette[i],
					borderWidth: 1.5,
					pointRadius: s.points ? 2.5 : 0,
					pointHoverRadius: 4,
					tension: 0,
					spanGaps: true,
				})),
			},
			options: {
				animation: false,
				responsive: true,
				maintainAspectRatio: false,
				parsing: false,
				normalized: true,
				interaction: { mode: 'nearest', axis: 'x', intersect: false },
				plugins: {
					legend: { display: series.length > 1, position: 'bottom' },
					tooltip: {
						callbacks: {
							title: (items) => items.length ? 'step ' + items[0].parsed.x : '',
							label: (item) => item.dataset.label + ': ' +
								(opts.format ? opts.format(item.parsed.y) : Number(item.parsed.y).toPrecision(5)),
						},
					},
				},
				scales: scales,
			},
		});
		rangeZoom(chart, canvas);
		return chart;
	}

	/* Appends points: add(chart, datasetIndex, x, y); the caller calls
	 * refresh (once per batch of events). */
	function add(chart, i, x, y) {
		if (typeof x !== 'number' || typeof y !== 'number' || !isFinite(y))
			return;
		const d = chart.data.datasets[i].data;
		if (d.length && d[d.length - 1].x >= x) {
			/* a resumed job repeats steps: keep the newest value */
			while (d.length && d[d.length - 1].x >= x)
				d.pop();
		}
		d.push({ x: x, y: y });
	}

	function refresh(chart) {
		if (chart.$zoomed) {
			const x = chart.options.scales.x;
			const r = yRange(chart, x.min, x.max);
			if (r) {
				chart.options.scales.y.min = r[0];
				chart.options.scales.y.max = r[1];
			}
		}
		chart.update('none');
	}

	/* The memory plan as one stacked horizontal bar, a segment per term
	 * (terms of 0 left out); the device's memory is named under it. */
	function planBar(canvas, terms, deviceBytes) {
		const names = Object.keys(terms).filter((k) => terms[k] > 0);
		const datasets = names.map((k, i) => ({
			label: k,
			data: [terms[k]],
			backgroundColor: palette[i % palette.length],
			stack: 'plan',
		}));
		const chart = new Chart(canvas, {
			type: 'bar',
			data: { labels: ['plan'], datasets: datasets },
			options: {
				indexAxis: 'y',
				animation: false,
				responsive: true,
				maintainAspectRatio: false,
				plugins: {
					legend: { position: 'bottom', labels: { boxWidth: 12 } },
					tooltip: { callbacks: { label: (item) => item.dataset.label + ': ' + bytes(item.raw) } },
				},
				scales: {
					x: {
						stacked: true,
						ticks: { callback: (v) => bytes(v) },
						title: { display: !!deviceBytes, text: deviceBytes ? 'device memory ' + bytes(deviceBytes) : '' },
					},
					y: { stacked: true, display: false },
				},
			},
		});
		return chart;
	}

	window.TacoCharts = { lineChart, add, refresh, setRange, planBar, bytes };
})();
