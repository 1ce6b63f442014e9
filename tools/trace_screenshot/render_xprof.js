// Renders a profile in the trace viewer of TensorBoard's profile plugin
// (the xprof package's standalone server) and saves a PNG.
//
//   node render_xprof.js SERVER OUT.png [ZOOM[,AT]]
//
// SERVER is the running xprof server (http://localhost:8791, started with
// `xprof --logdir LOGDIR --port 8791`); its newest run and first host are
// opened. ZOOM (default 0) zooms in that many steps (the trace viewer's
// "w" key) around AT (default 0.25), a fraction of the tracks' width as
// first drawn (the whole trace, with a margin on each side). Needs Chromium (or set
// CHROMIUM to its path) and playwright-core (npm install playwright-core,
// anywhere on NODE_PATH). No network: the page and the trace come from the
// local server; the fonts and charts it would load from the web are not
// needed by the trace viewer.
// RENDER_DEBUG=1 saves a PNG of each stage (/tmp/render_xprof_N.png).
const { chromium } = require('playwright-core');

const WIDTH = 1400, HEIGHT = 560;

async function json(page, url) {
  const response = await page.request.get(url);
  if (!response.ok()) throw new Error(`${url}: HTTP ${response.status()}`);
  return response.json();
}

async function render(server, out, zoom, at) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: WIDTH, height: HEIGHT } });
    const api = `${server}/data/plugin/profile`;
    const runs = await json(page, `${api}/runs`);
    if (!runs.length) throw new Error(`${server} has no profile runs (is --logdir right?)`);
    const run = runs[runs.length - 1];
    const hosts = await json(page, `${api}/hosts?run=${run}&tag=trace_viewer@`);
    const host = hosts[0].hostname;
    const tag = encodeURIComponent('trace_viewer@');
    await page.goto(`${api}/trace_viewer@?run=${run}&tag=${tag}&host=${host}`);
    const viewer = page.frameLocator('iframe');
    // The process headers' labels exist (hidden) once the trace is in.
    await viewer.getByText('/host:CPU').first().waitFor({ state: 'attached', timeout: 60000 });
    await page.waitForTimeout(2000);
    await debug(page);
    await page.mouse.click(33, 31);              // hides the sidebar (the menu button)
    await page.waitForTimeout(1500);
    await debug(page);
    if (zoom > 0) {
      const box = await page.locator('iframe').boundingBox();
      await page.mouse.click(box.x + box.width / 2, box.y + box.height - 80);  // focus, no event
      const labels = 250;                        // the track names' column
      await page.mouse.move(box.x + labels + (box.width - labels) * at, box.y + 150);
      for (let i = 0; i < zoom; i++) {
        await page.keyboard.press('w');
        await page.waitForTimeout(150);
      }
      await page.waitForTimeout(1000);
      await debug(page);
    }
    await page.mouse.move(WIDTH - 5, HEIGHT - 5);
    await page.screenshot({ path: out, clip: { x: 0, y: 0, width: WIDTH, height: 350 } });
  } finally {
    await browser.close();
  }
}

let stage = 0;
async function debug(page) {
  if (process.env.RENDER_DEBUG) await page.screenshot({ path: `/tmp/render_xprof_${stage++}.png` });
}

const [server, out, view] = process.argv.slice(2);
if (!server || !out) {
  console.error('usage: node render_xprof.js SERVER OUT.png [ZOOM[,AT]]');
  process.exit(2);
}
const [zoom, at] = (view || '0').split(',').map(Number);
render(server.replace(/\/$/, ''), out, zoom, at === undefined ? 0.25 : at).catch((e) => {
  console.error(e);
  process.exit(1);
});
