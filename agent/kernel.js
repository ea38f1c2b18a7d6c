// A JavaScript context's driver, run by boxyard-agent as the sandbox user (`node -e`): the
// same protocol as kernel.py. Code runs in this process's global scope (node's vm), so what
// one run declares the next one sees; a promise is awaited; SIGINT breaks a run.
"use strict";
const fs = require("fs");
const util = require("util");
const vm = require("vm");
const readline = require("readline");

const say = (message) => fs.writeSync(3, JSON.stringify(message) + "\n");
const text = (args) => util.format(...args) + "\n";
for (const [name, stream] of [["log", "stdout"], ["info", "stdout"], ["debug", "stdout"],
                              ["error", "stderr"], ["warn", "stderr"]]) {
  console[name] = (...args) => { say({ type: stream, text: text(args) }); };
}
for (const stream of ["stdout", "stderr"]) {
  process[stream].write = (chunk) => { say({ type: stream, text: String(chunk) }); return true; };
}
process.on("SIGINT", () => {});

let count = 0;
function fault(error) {
  if (error instanceof Error) {
    return { type: "error", name: error.name, value: error.message, traceback: error.stack || "" };
  }
  return { type: "error", name: "Error", value: util.inspect(error), traceback: "" };
}

async function run(request) {
  count += 1;
  const env = request.env || {};
  const saved = {};
  for (const key of Object.keys(env)) { saved[key] = process.env[key]; process.env[key] = env[key]; }
  let status = "ok";
  try {
    let value = vm.runInThisContext(request.code || "", { filename: `run-${count}`, breakOnSigint: true });
    if (value && typeof value.then === "function") value = await value;
    if (value !== undefined) {
      say({ type: "result", data: { "text/plain": util.inspect(value) }, main: true });
    }
  } catch (error) {
    status = "error";
    say(fault(error));
  } finally {
    for (const key of Object.keys(saved)) {
      if (saved[key] === undefined) delete process.env[key]; else process.env[key] = saved[key];
    }
  }
  say({ type: "end", status, count });
}

say({ type: "ready", pid: process.pid });
let turn = Promise.resolve();
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  turn = turn.then(() => run(JSON.parse(line)));
}).on("close", () => turn.then(() => process.exit(0)));
