// tests/console/console.js - drives shardqd's admin console (GET /) in
// Debian's chromium with puppeteer-core, one action per run; the driver
// (tests/test_console.c) checks the shards around each run.
//
//   node console.js COMMAND [ARGS]
//     escape ID          job ID's params, key and last_error show as text, in
//                        the job view, the failed view and the overview
//     retry-one ID       the failed view's Retry button of job ID
//     retry-selected IDS the checkboxes of IDS (comma-separated, ticked from
//                        the keyboard), then "Retry selected"
//     retry-type TYPE    "Retry all failed jobs of this type", confirmed
//     pause TYPE         the types view's Pause button (a first confirm
//     resume TYPE        dismissed: nothing happens; then accepted); each
//                        type's limits as CONSOLE_LIMITS says
//                        ("y=at most 7 running;a=none")
//     list TYPE          the job list of TYPE: its CONSOLE_EXPECT_N ready jobs
//                        a page of 25 at a time (Next), each once; those
//                        created over an hour ago (CONSOLE_OLD_IDS, comma-
//                        separated) and in the last hour; its failed job's
//                        key (CONSOLE_KEY) as text
//     list-unavailable   the job list says it needs GET /v1/jobs
//
// Environment: CONSOLE_URL (http://127.0.0.1:PORT), CONSOLE_TOKEN (admin),
// CONSOLE_NODE (the directory puppeteer-core was installed into),
// CONSOLE_SHOTS (where screenshots go: the build directory),
// CONSOLE_STALL_S (how long a wait may see no progress), CONSOLE_CHROMIUM,
// and for escape: CONSOLE_KEY, CONSOLE_ERROR, CONSOLE_MARKS (strings
// separated by newlines that the params view must show literally).
"use strict";
const path = require("path");
const fs = require("fs");
const puppeteer = require(path.join(process.env.CONSOLE_NODE, "node_modules", "puppeteer-core"));

const BASE = process.env.CONSOLE_URL;
const TOKEN = process.env.CONSOLE_TOKEN;
const SHOTS = process.env.CONSOLE_SHOTS;
const STALL = 1000 * Number(process.env.CONSOLE_STALL_S || 90);
const [cmd, arg] = process.argv.slice(2);

function fail(msg) {
  throw new Error(msg);
}
function say(msg) {
  console.log("console: " + msg);
}

async function main() {
  fs.mkdirSync(SHOTS, {recursive: true});
  const browser = await puppeteer.launch({
    executablePath: process.env.CONSOLE_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
    userDataDir: path.join(SHOTS, "profile"),
    protocolTimeout: STALL * 2,
  });
  const problems = [];
  const posts = [];
  const dialogs = [];
  let nextDialog = [];
  try {
    const page = await browser.newPage();
    page.setDefaultTimeout(STALL);
    await page.setViewport({width: 1200, height: 900});
    page.on("pageerror", e => problems.push("page error: " + e.message));
    page.on("console", m => {
      if (m.type() === "error" || /Content Security Policy/i.test(m.text()))
        if (!/Failed to load resource/.test(m.text())) problems.push("console " + m.type() + ": " + m.text());
    });
    page.on("request", r => { if (r.method() === "POST") posts.push(r.url() + " " + (r.postData() || "")); });
    page.on("dialog", async d => {
      dialogs.push(d.message());
      const accept = nextDialog.length ? nextDialog.shift() : false;
      if (accept) await d.accept(); else await d.dismiss();
    });
    const shot = async name => {
      const p = path.join(SHOTS, name + ".png");
      await page.screenshot({path: p, fullPage: true});
      say("screenshot " + p);
    };
    const open = async view => {
      await page.goto(BASE + "/#" + view + "&token=" + encodeURIComponent(TOKEN), {waitUntil: "load"});
      const h = await page.evaluate(() => location.hash);
      if (h.includes("token=")) fail("the token stays in the address: " + h);
    };
    const text = sel => page.$eval(sel, e => e.textContent);
    const waitText = (sel, want) =>
      page.waitForFunction((s, w) => { const e = document.querySelector(s); return e && e.textContent === w; },
        {polling: 100, timeout: STALL}, sel, want)
        .catch(async e => fail("waited for " + sel + " to read '" + want + "': " + e.message +
          "; it reads '" + (await page.$eval(sel, x => x.textContent).catch(() => "(absent)")) + "'"));
    const noHtml = async where => {
      // an <img src=x> that became an element would load (and fail) now
      await page.waitForNetworkIdle({idleTime: 300, timeout: STALL});
      const pwned = await page.evaluate(() => window.__pwned);
      if (pwned !== undefined) fail(where + ": a job's value ran as HTML (window.__pwned = " + pwned + ")");
      const n = await page.evaluate(() => document.querySelectorAll("main img, main script, main [onerror]").length);
      if (n) fail(where + ": " + n + " img/script/onerror elements in the page's data");
    };

    if (cmd === "escape") {
      const id = arg;
      const key = process.env.CONSOLE_KEY, err = process.env.CONSOLE_ERROR;
      const marks = (process.env.CONSOLE_MARKS || "").split("\n").filter(Boolean);
      await open("/job/" + id);
      await page.waitForSelector("body[data-job-rendered=\"" + id + "\"]");
      await page.waitForSelector("#job-params", {visible: true});
      const params = await text("#job-params");
      for (const m of marks)
        if (!params.includes(m)) fail("the job view's params do not show '" + m + "' as text:\n" + params);
      if ((await text("[data-k=\"job/key\"]")) !== key) fail("the job view's key is not the text '" + key + "'");
      await waitText("#job-error", err);
      if ((await text("[data-k=\"job/status\"]")) !== "failed") fail("the job view does not say failed");
      await noHtml("job view");
      await shot("console-escape-job");
      say("job view: params, key and last_error shown as text");

      await page.evaluate(() => { location.hash = "#/failed"; });
      await page.waitForSelector("[data-k=\"failed/" + id + "/error\"]", {visible: true});
      await waitText("[data-k=\"failed/" + id + "/error\"]", err);
      await noHtml("failed view");
      await shot("console-escape-failed");
      say("failed view: last_error shown as text");

      await page.evaluate(() => { location.hash = "#/"; });
      await page.waitForSelector("body[data-rendered]");
      const ov = await text("#failed");
      if (!ov.includes(err)) fail("the overview's failed jobs do not show the error as text:\n" + ov);
      await noHtml("overview");
      await shot("console-overview");
      say("overview: last_error shown as text");
    } else if (cmd === "retry-one") {
      await open("/failed");
      const b = "button[data-retry=\"" + arg + "\"]";
      await page.waitForSelector(b, {visible: true});
      await shot("console-failed-before");
      await page.click(b);
      await waitText("[data-k=\"retry/" + arg + "\"]", "ready again");
      await shot("console-failed-retried-one");
      say("job " + arg + ": retry answered ok");
    } else if (cmd === "retry-selected") {
      const ids = arg.split(",");
      await open("/failed");
      for (const id of ids) {
        const s = "input[data-select=\"" + id + "\"]";
        await page.waitForSelector(s, {visible: true});
        await page.focus(s);
        await page.keyboard.press("Space");
      }
      await waitText("#retry-selected", "Retry selected (" + ids.length + ")");
      await page.focus("#retry-selected");
      await page.keyboard.press("Enter");
      for (const id of ids) await waitText("[data-k=\"retry/" + id + "\"]", "ready again");
      await shot("console-failed-retried-selected");
      say("jobs " + arg + ": retry answered ok");
    } else if (cmd === "retry-type") {
      await open("/failed");
      await page.waitForSelector("#retry-type option[value=\"" + arg + "\"]");
      await page.select("#retry-type", arg);
      nextDialog = [false];
      await page.click("#retry-type-go");
      if (dialogs.length !== 1) fail("no confirm before retrying a whole type");
      if ((await text("#retry-type-result")) !== "" || posts.length) fail("a dismissed confirm still retried: " + posts);
      nextDialog = [true];
      await page.click("#retry-type-go");
      await page.waitForSelector("[data-k=\"retry-type/done\"]");
      await shot("console-failed-retried-type");
      say("type " + arg + ": " + (await text("#retry-type-result")) + " (confirm: " + JSON.stringify(dialogs[1]) + ")");
    } else if (cmd === "pause" || cmd === "resume") {
      await open("/types");
      const b = "button[data-type=\"" + arg + "\"]";
      await page.waitForSelector(b, {visible: true});
      /* each type's limits as the config has them (CONSOLE_LIMITS: type=text;...) */
      for (const [type, want] of (process.env.CONSOLE_LIMITS || "").split(";").filter(Boolean).map(x => x.split("="))) {
        const got = await text("[data-k=\"types/" + type + "/limit\"]");
        if (got !== want) fail("type " + type + "'s limit shows '" + got + "', not '" + want + "'");
      }
      const action = await page.$eval(b, e => e.getAttribute("data-action"));
      if (action !== cmd) fail("type " + arg + "'s button offers " + action + ", not " + cmd);
      nextDialog = [false];
      await page.click(b);
      if (dialogs.length !== 1) fail("no confirm before " + cmd);
      const still = await page.$eval(b, e => !e.disabled && e.getAttribute("data-action"));
      if (still !== cmd || posts.length) fail("a dismissed confirm still did " + cmd + ": " + posts);
      nextDialog = [true];
      await page.focus(b);
      await page.keyboard.press("Enter");   // from the keyboard
      await waitText("[data-k=\"types/" + arg + "/state\"]", cmd === "pause" ? "paused" : "claimed");
      await page.waitForSelector(b + "[data-action=\"" + (cmd === "pause" ? "resume" : "pause") + "\"]");
      await shot("console-types-" + cmd + "d");
      say("type " + arg + ": " + cmd + "d (" + posts.join("; ") + ")");
    } else if (cmd === "list") {
      const want = Number(process.env.CONSOLE_EXPECT_N);
      await open("/jobs?type=" + encodeURIComponent(arg) + "&status=ready");
      await page.waitForSelector("body[data-jobs-rendered]");
      const rendered = () => page.$eval("body", b => b.getAttribute("data-jobs-rendered"));
      const show = async act => {
        const before = await rendered();
        await act();
        await page.waitForFunction(v => document.body.getAttribute("data-jobs-rendered") !== v,
          {polling: 100, timeout: STALL}, before);
      };
      /* every ready job the filter shows, following Next page to the end */
      const listAll = async (created, shotName) => {
        await show(async () => {
          await page.select("#f-type", arg);
          await page.select("#f-status", "ready");
          await page.select("#f-created", created);
          await page.select("#f-limit", "25");
          await page.click("#jobs-filter button");
        });
        const seen = new Set();
        let pages = 0;
        for (;;) {
          const ids = await page.$$eval("#joblist tbody tr[data-job]", rs => rs.map(r => r.getAttribute("data-job")));
          const st = await page.$$eval("#joblist tbody tr[data-job] td:nth-child(3)", rs => rs.map(r => r.textContent));
          if (st.some(x => x !== "ready")) fail("the ready list shows other statuses: " + st);
          for (const id of ids) { if (seen.has(id)) fail("job " + id + " listed twice"); seen.add(id); }
          pages++;
          if (pages === 1 && shotName) await shot(shotName);
          if (await page.$eval("#jobs-next", b => b.disabled)) break;
          if (pages > want) fail("more pages than jobs");
          await show(() => page.click("#jobs-next"));
        }
        return [seen, pages];
      };
      const [seen, pages] = await listAll("", "console-jobs-page1");
      if (seen.size !== want) fail("the list showed " + seen.size + " ready jobs of " + arg + ", not " + want);
      say("job list: " + want + " ready jobs of " + arg + " in " + pages + " pages, each once");
      /* by creation time: the jobs the driver made two hours old, and the rest */
      const old = (process.env.CONSOLE_OLD_IDS || "").split(",").filter(Boolean).sort().join(",");
      const [olds] = await listAll("o:3600000", "console-jobs-created-old");
      if ([...olds].sort().join(",") !== old)
        fail("'created over an hour ago' showed jobs " + [...olds].sort().join(",") + ", not " + old);
      const [fresh] = await listAll("w:3600000", null);
      if (fresh.size !== want - olds.size || [...olds].some(id => fresh.has(id)))
        fail("'created in the last hour' showed " + fresh.size + " jobs, not the " + (want - olds.size) + " others");
      say("job list: created over an hour ago " + olds.size + ", in the last hour " + fresh.size);
      await page.select("#f-created", "");
      await show(async () => {
        await page.select("#f-status", "failed");
        await page.click("#jobs-filter button");
      });
      const keys = await page.$$eval("#joblist tbody tr[data-job] td:nth-child(4)", rs => rs.map(r => r.textContent));
      if (keys.length !== 1 || keys[0] !== process.env.CONSOLE_KEY)
        fail("the failed list's key is not the text '" + process.env.CONSOLE_KEY + "': " + JSON.stringify(keys));
      await noHtml("job list");
      await shot("console-jobs-failed");
      say("job list: the failed job's key shown as text");
    } else if (cmd === "list-unavailable") {
      await open("/jobs");
      await page.waitForSelector("[data-k=\"jobs/unavailable\"]", {visible: true});
      await shot("console-jobs-unavailable");
      say("job list: " + (await text("#jobs-msg")));
    } else {
      fail("unknown command " + cmd);
    }
    if (problems.length) fail(problems.join("\n"));
  } finally {
    await browser.close();
  }
}

main().then(() => process.exit(0), e => {
  console.error("console: FAILED (" + cmd + " " + (arg || "") + "): " + e.message);
  process.exit(1);
});
