// What the web-view tests share: their environment, the browser (Debian's
// chromium through playwright-core, no browser download; one page, every
// console error and page error collected into `problems`), and the
// `UI-RESULT` line tests/tests/ui.rs reads.
import { chromium } from 'playwright-core';

/// A required environment variable.
export function env(k) {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
}

export async function openBrowser(problems) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  const page = await browser.newPage({ viewport: { width: 1500, height: 1300 } });
  page.setDefaultTimeout(30_000);
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  return { browser, page };
}

/// Prints the result line with its problems and exits: 0 when there are none.
export function report(result, problems) {
  result.problems = problems;
  console.log(`UI-RESULT ${JSON.stringify(result)}`);
  process.exit(problems.length ? 1 : 0);
}
