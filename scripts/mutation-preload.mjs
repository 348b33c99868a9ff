// Loaded into every test process of a mutation run (stryker.config.mjs), never
// in the normal suite: under a mutant a test only has to fail, quickly.
import { createRequire } from 'node:module';
import fc from 'fast-check';

// A property stops at its first counterexample instead of shrinking it.
fc.configureGlobal({ endOnFailure: true });

// A failing assert.ok() without a message makes node read the call site's
// source to print the expression; on the single long line tsx emits for a
// test file that takes minutes per failure. The message is not needed here.
const require = createRequire(import.meta.url);
for (const id of ['node:assert', 'node:assert/strict']) {
  const mod = require(id);
  const ok = mod.ok;
  mod.ok = (value, message, ...rest) => ok(value, message ?? 'assert.ok: falsy value', ...rest);
}
