// The browser the web-view tests drive: Debian's chromium through
// playwright-core (no browser download), one page, every console error and
// page error collected into `problems`.
import { chromium } from 'playwright-core';

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
