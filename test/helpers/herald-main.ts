/** Runs the CLI from source (tsx), as bin/herald runs it from dist/: for tests of the CLI without a build. */
import { main } from '../../src/cli/main.js';

await main(process.argv);
