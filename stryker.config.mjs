// Mutation testing (StrykerJS, tap runner over node:test + tsx). Not a CI gate:
// a measurement kept current in README.md ("Mutation testing"). Run through
// scripts/mutation.sh (npm run mutation -- <folder|file>), which sets
// MUTATION_SCOPE; each scope runs only the unit tests mapped to it below, and
// Stryker's per-test-file coverage then runs, for each mutant, only the test
// files that reach it.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** Source prefix → unit-test folders (lab tests need root and namespaces: never mutated against). */
const TESTS_FOR = [
  ['src/controlplane/ipam', ['test/controlplane/ipam']],
  ['src/store/etcd', ['test/store']],
  ['src/store', ['test/store']],
  ['src/core', ['test/core']],
  ['src/controlplane', ['test/controlplane']],
  ['src/datapath', ['test/datapath']],
];

function unitTests(dir) {
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...unitTests(path));
    else if (name.endsWith('.test.ts') && !name.endsWith('.lab.test.ts')) out.push(path);
  }
  return out;
}

const scope = (process.env.MUTATION_SCOPE ?? 'src/core').replace(/\/+$/, '');
const entry = TESTS_FOR.find(([prefix]) => scope === prefix || scope.startsWith(`${prefix}/`));
if (!entry) throw new Error(`mutation: no unit tests mapped for ${scope} (add it to TESTS_FOR in stryker.config.mjs)`);
// A scope with a mirrored test file or folder (src/core/jobs.ts → test/core/jobs.test.ts,
// src/core/statedb → test/core/statedb) runs only those; MUTATION_TESTS
// (space-separated) overrides both.
// A file one folder down may be mirrored with a dash instead (src/store/etcd/session.ts →
// test/store/etcd-session.test.ts, the store tests' naming).
const mirrored = scope.replace(/^src\//, 'test/').replace(/\.ts$/, '.test.ts');
const mirror = [mirrored, mirrored.replace(/\/([^/]+)$/, '-$1')].find((m) => existsSync(m) && (statSync(m).isDirectory() || m.endsWith('.test.ts')));
const testFiles = process.env.MUTATION_TESTS
  ? process.env.MUTATION_TESTS.split(/\s+/).filter(Boolean)
  : mirror
    ? statSync(mirror).isDirectory() ? unitTests(mirror) : [mirror]
    : entry[1].flatMap(unitTests);
const name = scope.replace(/^src\//, '').replace(/\.ts$/, '').replaceAll('/', '-');

export default {
  testRunner: 'tap',
  plugins: ['@stryker-mutator/tap-runner'],
  tap: {
    testFiles,
    nodeArgs: ['-r', '{{hookFile}}', '--import', 'tsx', '--import', './scripts/mutation-preload.mjs', '--test-reporter=tap', '{{testFile}}'],
    forceBail: true,
  },
  mutate: scope.endsWith('.ts') ? [scope] : [`${scope}/**/*.ts`, `!${scope}/**/index.ts`],
  coverageAnalysis: 'perTest',
  // A loaded 2-core machine shared with other work: one test process at a time, generous timeouts.
  concurrency: 1,
  timeoutMS: 4000,
  timeoutFactor: 3,
  // Module-level (static) mutants would each rerun every mapped test file: skipped to keep runs short.
  ignoreStatic: true,
  incremental: true,
  incrementalFile: `reports/mutation/${name}.incremental.json`,
  reporters: ['clear-text', 'progress-append-only', 'json'],
  jsonReporter: { fileName: `reports/mutation/${name}.json` },
  clearTextReporter: { allowColor: false, logTests: false, maxTestsToLog: 0 },
  tempDirName: `.stryker-tmp/${name}`,
  cleanTempDir: true,
  thresholds: { high: 85, low: 70, break: null },
  ignorePatterns: ['dist', 'build', 'reports', '.stryker-tmp', 'lab/**/*.o'],
};
