// Browser test of kubewasm's web view (`kubewasm run --ui`), run by
// tests/tests/ui.rs against a running host: Debian's chromium driven by
// playwright-core (no browser download). Every wait is on a condition
// with a timeout, never a sleep.
//
// Environment (set by the Rust test):
//   UI_URL          http://HOST:PORT/ui of the host under test (its own
//                   listener, not the metrics one)
//   UI_NAME         a label for screenshots and the report (local, apiserver)
//   UI_PLUGINS      the host's plugin folder (plugins are dropped into it)
//   UI_NOOP_WASM    a built plugin to drop (the noop plugin)
//   UI_NAMESPACE    namespace the test's ConfigMaps and its Secret go to
//                   (exists; the config-replicator plugin watches all
//                   ConfigMaps, the secret-reader plugin its Secrets)
//   UI_OTHER_NS     a second namespace (for the filter)
//   UI_ARTIFACTS    where screenshots go
//   UI_CLUSTER_DIR  local cluster: its manifest folder (objects are files)
//   UI_KUBECONFIG   real API server: objects are created with its REST API,
//                   as the kubeconfig's token user (the test control plane
//                   writes one cluster, one user, CA data and a token)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//
// Prints one `UI-RESULT {...}` line with the measured latencies.
// Last, a Secret is created and viewed through the page: the cache browser
// shows its keys with "<redacted>" values, and no part of the page ever
// holds its value.
import { env, openBrowser, report } from './browser.mjs';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';

const URL_ = env('UI_URL');
const NAME = env('UI_NAME');
const NS = env('UI_NAMESPACE');
const OTHER_NS = env('UI_OTHER_NS');
const ARTIFACTS = env('UI_ARTIFACTS');
fs.mkdirSync(ARTIFACTS, { recursive: true });

// ---- the cluster: create a ConfigMap or a Secret ----

function configMap(ns, name, labels) {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns, labels }, data: { by: 'ui-test' } };
}

async function create(obj) {
  if (process.env.UI_CLUSTER_DIR) {
    // The local cluster: a manifest file (written then renamed, as editors do).
    const dir = path.join(process.env.UI_CLUSTER_DIR, obj.metadata.namespace);
    fs.mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `${obj.metadata.name}.json`);
    fs.writeFileSync(file + '.tmp', JSON.stringify(obj));
    fs.renameSync(file + '.tmp', file);
    return;
  }
  const kc = fs.readFileSync(env('UI_KUBECONFIG'), 'utf8');
  const field = (k) => {
    const m = kc.match(new RegExp(`^\\s*${k}:\\s*"?([^"\\s]+)"?\\s*$`, 'm'));
    if (!m) throw new Error(`no ${k} in ${env('UI_KUBECONFIG')}`);
    return m[1];
  };
  const server = new URL(field('server'));
  const ca = Buffer.from(field('certificate-authority-data'), 'base64');
  const token = field('token');
  const body = JSON.stringify(obj);
  await new Promise((resolve, reject) => {
    const req = https.request({
      host: server.hostname, port: server.port, method: 'POST',
      path: `/api/v1/namespaces/${obj.metadata.namespace}/${{ ConfigMap: 'configmaps', Secret: 'secrets' }[obj.kind]}`,
      ca,
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => (res.statusCode === 201 ? resolve() : reject(new Error(`create ${obj.metadata.name}: ${res.statusCode} ${text}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function dropFile(name, bytes) {
  const dir = env('UI_PLUGINS');
  const tmp = path.join(dir, `.${name}.tmp`);
  fs.writeFileSync(tmp, bytes);
  fs.renameSync(tmp, path.join(dir, name));
}

// ---- the test ----

const result = { name: NAME };
const problems = [];
const { browser, page } = await openBrowser(problems);
const shot = (what) => page.screenshot({ path: path.join(ARTIFACTS, `${NAME}-${what}.png`), fullPage: true });

function step(what) {
  console.log(`[${NAME}] ${what}`);
}

try {
  step(`open ${URL_}`);
  await page.goto(URL_);
  await page.waitForSelector('#conn.ok');
  await page.waitForSelector('#plugins tr[data-plugin="config-replicator"][data-state="serving"]');
  await page.waitForSelector('#informers tr[data-informer^="configmaps"]');

  step('a plugin dropped into the folder appears and serves');
  dropFile('dropped.wasm', fs.readFileSync(env('UI_NOOP_WASM')));
  await page.waitForSelector('#plugins tr[data-plugin="dropped"][data-state="serving"]', { timeout: 60_000 });
  const version = await page.textContent('#plugins tr[data-plugin="dropped"] code');
  if (!/^[0-9a-f]{12}$/.test(version)) problems.push(`dropped plugin version ${JSON.stringify(version)}`);
  const language = await page.textContent('#plugins tr[data-plugin="dropped"] td:nth-child(2)');
  result.language = language;

  step('a broken plugin shows its error');
  dropFile('broken.wasm', 'this is not a WebAssembly component');
  await page.waitForSelector('#plugins tr[data-plugin="broken"][data-state="broken"]');
  const error = await page.textContent('#plugins tr[data-error-of="broken"]');
  if (!error.includes('not a WebAssembly file')) problems.push(`broken plugin's error: ${JSON.stringify(error)}`);

  step('an object created in the cluster appears in the feed and the cache browser within a second');
  const probe = `ui-probe-${Date.now()}`;
  const t0 = Date.now();
  await create(configMap(NS, probe, { 'ui-test': 'probe' }));
  const created = Date.now();
  await page.waitForSelector(`#feed-rows .feed-row[data-plugin="config-replicator"][data-name="${probe}"]`, { timeout: 1000 });
  result.feedMs = Date.now() - t0;
  result.createMs = created - t0;
  await page.selectOption('#cache-informer', { value: await page.getAttribute('#informers tr[data-informer^="configmaps"]', 'data-informer') });
  await page.fill('#cache-namespace', NS);
  await page.fill('#cache-selector', 'ui-test=probe');
  await page.click('#cache-load');
  await page.waitForSelector(`#cache-list li[data-name="${probe}"]`, { timeout: Math.max(1, 1000 - (Date.now() - t0)) });
  result.cacheMs = Date.now() - t0;
  await page.click(`#cache-list li[data-name="${probe}"]`);
  await page.waitForFunction((n) => document.querySelector('#cache-object').textContent.includes(`"name": "${n}"`), probe);
  // The selector filters: a selector nothing matches lists nothing.
  await page.fill('#cache-selector', 'ui-test=nothing');
  await page.click('#cache-load');
  await page.waitForFunction(() => document.querySelector('#cache-stats').textContent.startsWith('0 matching'));
  await page.fill('#cache-selector', 'ui-test=probe');
  await page.click('#cache-load');
  await page.waitForSelector(`#cache-list li[data-name="${probe}"]`);
  await page.click(`#cache-list li[data-name="${probe}"]`);
  await page.waitForFunction((n) => document.querySelector('#cache-object').textContent.includes(`"name": "${n}"`), probe);
  await shot('web-view');

  step('the feed filter keeps only what matches');
  await page.fill('#feed-plugin', 'config-replicator');
  await page.fill('#feed-namespace', NS);
  await page.waitForSelector(`#feed-section[data-filter="plugin=config-replicator&namespace=${NS}"]`);
  const other = `ui-other-${Date.now()}`;
  const mine = `ui-mine-${Date.now()}`;
  await create(configMap(OTHER_NS, other, {}));
  await create(configMap(NS, mine, {}));
  await page.waitForSelector(`#feed-rows .feed-row[data-name="${mine}"]`, { timeout: 5000 });
  const shown = await page.$$eval('#feed-rows .feed-row', (rows) => rows.map((r) => [r.dataset.plugin, r.dataset.namespace, r.dataset.name]));
  for (const [plugin, ns, name] of shown) {
    if (plugin !== 'config-replicator' || ns !== NS) problems.push(`the filter let through ${plugin} ${ns}/${name}`);
  }
  if (!shown.length) problems.push('nothing shown with the filter');

  step('pause holds rows back; resume shows new ones again');
  await page.click('#pause');
  const held = `ui-held-${Date.now()}`;
  await create(configMap(NS, held, {}));
  await page.waitForFunction(() => /paused \([1-9]/.test(document.querySelector('#feed-stats').textContent), null, { timeout: 5000 });
  if (await page.$(`#feed-rows .feed-row[data-name="${held}"]`)) problems.push('a row was added while paused');
  await page.click('#pause');
  const after = `ui-after-${Date.now()}`;
  await create(configMap(NS, after, {}));
  await page.waitForSelector(`#feed-rows .feed-row[data-name="${after}"]`, { timeout: 5000 });
  await shot('filtered');

  step('a Secret viewed through the page shows its keys with redacted values only');
  await page.waitForSelector('#plugins tr[data-plugin="secret-reader"][data-state="serving"]');
  await page.fill('#feed-plugin', 'secret-reader');
  await page.waitForSelector(`#feed-section[data-filter="plugin=secret-reader&namespace=${NS}"]`);
  const secret = `ui-secret-${Date.now()}`;
  const plain = `hunter2-${Date.now()}`;
  const encoded = Buffer.from(plain).toString('base64');
  await create({
    apiVersion: 'v1', kind: 'Secret', metadata: { name: secret, namespace: NS }, type: 'Opaque',
    data: { password: encoded }, stringData: { token: `${plain}-token` },
  });
  await page.waitForSelector(`#feed-rows .feed-row[data-plugin="secret-reader"][data-name="${secret}"]`, { timeout: 5000 });
  await page.waitForSelector('#informers tr[data-informer^="secrets"]');
  await page.selectOption('#cache-informer', { value: await page.getAttribute('#informers tr[data-informer^="secrets"]', 'data-informer') });
  await page.fill('#cache-namespace', NS);
  await page.fill('#cache-selector', '');
  await page.click('#cache-load');
  await page.waitForSelector(`#cache-list li[data-name="${secret}"]`);
  await page.click(`#cache-list li[data-name="${secret}"]`);
  await page.waitForFunction((n) => document.querySelector('#cache-object').textContent.includes(`"name": "${n}"`), secret);
  const secretText = await page.textContent('#cache-object');
  if (!secretText.includes('"password": "<redacted>"')) problems.push(`the Secret's password key is not shown redacted: ${secretText}`);
  const pageText = await page.evaluate(() => document.documentElement.outerHTML + document.body.innerText);
  for (const value of [plain, encoded]) {
    if (secretText.includes(value) || pageText.includes(value)) problems.push(`the page shows the Secret's value ${value}`);
  }
  result.secretShown = JSON.parse(secretText).data;
  await shot('secret');
} catch (e) {
  problems.push(`${e.name}: ${e.message}`);
  await shot('failure').catch(() => {});
} finally {
  await browser.close();
}

report(result, problems);
