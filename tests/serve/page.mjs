// etch serve's chat page in headless Chromium (Debian's, driven by playwright-core): type a message,
// see the answer stream in and the stats appear, then save a screenshot.
// usage: node page.mjs PORT SCREENSHOT.png
import { chromium } from "playwright-core";

const [port, shot] = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
let ok = false;
try {
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${port}/`);
  await page.waitForFunction(() => document.getElementById("model").textContent.length > 0);
  await page.fill("#input", "Tell me a story about a cat.");
  await page.press("#input", "Enter");
  // the answer streams into its bubble; the stop button is live meanwhile
  await page.waitForSelector(".assistant[data-done='1']", { timeout: 30000 });
  const answer = await page.textContent(".assistant");
  const stats = await page.textContent("#stats");
  await page.screenshot({ path: shot, fullPage: true });
  ok = answer.trim().length > 0 && /prompt tokens prefilled/.test(stats) && /tok\/s/.test(stats);
  console.log(`page: answer ${JSON.stringify(answer.slice(0, 60))}..., stats "${stats}"`);
} finally {
  await browser.close();
}
console.log(ok ? "page: 1 passed, 0 failed" : "page: 0 passed, 1 failed");
process.exit(ok ? 0 : 1);
