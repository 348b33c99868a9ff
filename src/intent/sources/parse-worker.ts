/**
 * Entry of the parser thread (see worker-parser.ts): runs one ParseJob from
 * `workerData` and posts its progress and outcome.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { runParseJob, type ParseJob, type ParseMessage } from './parse-job.js';

const port = parentPort;
if (!port) throw new Error('parse-worker.js runs only as a worker thread');
const post = (m: ParseMessage): void => port.postMessage(m);
const outcome = runParseJob(workerData as ParseJob, (file) => post({ type: 'file', file }));
post({ type: 'done', outcome });
