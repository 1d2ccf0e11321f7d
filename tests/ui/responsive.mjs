// The web view under load, run by tests/tests/ui.rs: the host delivers
// thousands of deltas a second to one plugin (a short resync period over
// thousands of Pods) while Debian's chromium, driven by playwright-core,
// keeps the page open. Measures what an operator feels: the gaps between
// the page's animation frames, the time from a click (pause, resume, the
// cache browser's Load) to its effect on the page, and the rows the feed
// receives, and how busy the page's main thread was (Chrome's own
// counters). Every wait is on a condition with a timeout, never a sleep.
//
// Environment (set by the Rust test):
//   UI_URL        http://HOST:PORT/ui of the host under test
//   UI_NAME       a label for screenshots and the report
//   UI_PLUGIN     the plugin under load (its row shows its deltas/s)
//   UI_RATE_MIN   the deltas/s the plugin must reach before measuring
//   UI_SECONDS    how long to measure
//   UI_ARTIFACTS  where the screenshot goes
//   CHROMIUM      the browser (default /usr/bin/chromium)
//
// Prints one `UI-RESULT {...}` line with the figures.
import { env, openBrowser, report } from './browser.mjs';
import fs from 'node:fs';
import path from 'node:path';

const URL_ = env('UI_URL');
const NAME = env('UI_NAME');
const PLUGIN = env('UI_PLUGIN');
const RATE_MIN = Number(env('UI_RATE_MIN'));
const SECONDS = Number(env('UI_SECONDS'));
const ARTIFACTS = env('UI_ARTIFACTS');
fs.mkdirSync(ARTIFACTS, { recursive: true });

const result = { name: NAME };
const problems = [];
const { browser, page } = await openBrowser(problems);

const pct = (xs, p) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const round = (x) => (x === null ? null : Math.round(x * 10) / 10);
// The plugin's deltas/s as its row shows it (the 6th cell).
const rate = () => page.evaluate((p) => {
  const row = document.querySelector(`#plugins tr[data-plugin="${p}"]`);
  return row ? Number(row.cells[5].textContent) || 0 : 0;
}, PLUGIN);
// Rows the feed received (shown plus held while paused), from its stats line.
const received = () => page.evaluate(() => {
  const t = document.querySelector('#feed-stats').textContent;
  const n = (re) => Number((t.match(re) || [0, '0'])[1].replace(/,/g, ''));
  return { shown: n(/shown ([\d,]+)/), matched: n(/of ([\d,]+) matching/), held: n(/paused \(([\d,]+)/) };
});

/// Time from a click to `effect` holding on the page, in ms.
async function clickLatency(selector, effect, arg) {
  const t0 = Date.now();
  await page.click(selector);
  await page.waitForFunction(effect, arg, { timeout: 10_000 });
  return Date.now() - t0;
}

try {
  await page.goto(URL_);
  await page.waitForSelector('#conn.ok');
  await page.waitForSelector(`#plugins tr[data-plugin="${PLUGIN}"][data-state="serving"]`, { timeout: 60_000 });
  // The load is real before anything is measured: the page itself shows
  // the plugin at the rate.
  await page.waitForFunction(([p, min]) => {
    const row = document.querySelector(`#plugins tr[data-plugin="${p}"]`);
    return row && Number(row.cells[5].textContent) >= min;
  }, [PLUGIN, RATE_MIN], { timeout: 120_000, polling: 200 });

  // Frame gaps: a requestAnimationFrame loop records when each frame ran,
  // first while the feed streams untouched (half the time), then while
  // the pause button is clicked over and over.
  await page.evaluate(() => {
    window.__frames = [];
    const tick = (t) => { window.__frames.push(t); if (!window.__stop) requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
  });
  // Where the page's main thread spends its time (Chrome's own counters):
  // seconds of script, style, layout and all tasks per second of the test.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  const busy = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
  const busy0 = await busy();
  const rates = [];
  const clicks = [];
  const start = Date.now();
  const before = await received();
  while (Date.now() - start < (SECONDS * 1000) / 2) {
    rates.push(await rate());
    await page.waitForTimeout(250); // pacing the sampling of the rate, not a synchronisation
  }
  const streamed = await received();
  const live = (Date.now() - start) / 1000;
  const liveFrames = await page.evaluate(() => window.__frames.length);
  while (Date.now() - start < SECONDS * 1000) {
    rates.push(await rate());
    clicks.push(await clickLatency('#pause', () => /paused/.test(document.querySelector('#feed-stats').textContent)));
    clicks.push(await clickLatency('#pause', () => !/paused/.test(document.querySelector('#feed-stats').textContent)));
  }
  // The cache browser lists the Pods while the feed streams.
  await page.selectOption('#cache-informer', { value: await page.getAttribute('#informers tr[data-informer^="pods"]', 'data-informer') });
  const cacheMs = await clickLatency('#cache-load', () => /^[1-9][\d,]* matching/.test(document.querySelector('#cache-stats').textContent));
  const elapsed = (Date.now() - start) / 1000;
  const after = await received();
  const frames = await page.evaluate(() => { window.__stop = true; return window.__frames; });
  const busy1 = await busy();
  const share = (k) => round((100 * (busy1[k] - busy0[k])) / elapsed);
  const gaps = frames.slice(1).map((t, i) => t - frames[i]);
  const liveGaps = gaps.slice(0, liveFrames - 1);
  await page.screenshot({ path: path.join(ARTIFACTS, `${NAME}-under-load.png`), fullPage: false });

  Object.assign(result, {
    seconds: round(elapsed),
    pluginRate: { min: Math.min(...rates), median: pct(rates, 50), max: Math.max(...rates) },
    feedRowsPerSecond: round((after.matched - before.matched) / elapsed),
    feedRowsAddedPerSecondLive: round((streamed.shown - before.shown) / live),
    frames: gaps.length,
    frameGapMsLive: { p50: round(pct(liveGaps, 50)), p99: round(pct(liveGaps, 99)), max: round(Math.max(...liveGaps)) },
    frameGapMs: { p50: round(pct(gaps, 50)), p99: round(pct(gaps, 99)), max: round(Math.max(...gaps)) },
    clicks: clicks.length,
    clickMs: { p50: pct(clicks, 50), p99: pct(clicks, 99), max: Math.max(...clicks), each: clicks },
    cacheLoadMs: cacheMs,
    mainThreadPercent: { task: share('TaskDuration'), script: share('ScriptDuration'), style: share('RecalcStyleDuration'), layout: share('LayoutDuration') },
  });
  if (pct(rates, 50) < RATE_MIN) problems.push(`the plugin ran at ${pct(rates, 50)} deltas/s (median), under ${RATE_MIN}`);
} catch (e) {
  problems.push(`${e.name}: ${e.message}`);
  await page.screenshot({ path: path.join(ARTIFACTS, `${NAME}-failure.png`) }).catch(() => {});
} finally {
  await browser.close();
}

report(result, problems);
