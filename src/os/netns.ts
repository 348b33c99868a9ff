/**
 * Runs a function with this process's main thread in a named network
 * namespace (setns on /run/netns/<name>), then returns to the namespace it
 * was in. For opening a socket there: a socket stays in the namespace it was
 * created in, so it can be used from the home namespace afterwards (the
 * labs run one node per namespace inside one test process).
 */
import { closeSync, openSync } from 'node:fs';
import koffi from 'koffi';
import { HeraldError } from '../core/errors.js';

const CLONE_NEWNET = 0x40000000;
let setnsFn: ((fd: number, nstype: number) => number) | undefined;

export function inNetns<T>(name: string, fn: () => T): T {
  setnsFn ??= koffi.load('libc.so.6').func('int setns(int fd, int nstype)') as (fd: number, nstype: number) => number;
  const setns = setnsFn;
  const home = openSync('/proc/thread-self/ns/net', 'r');
  let target: number;
  try {
    target = openSync(`/run/netns/${name}`, 'r');
  } catch (e) {
    closeSync(home);
    throw new HeraldError('HERALD_BAD_ARGUMENT', `network namespace ${name}: ${(e as Error).message}`, { cause: e });
  }
  try {
    if (setns(target, CLONE_NEWNET) !== 0) throw new HeraldError('HERALD_INTERNAL', `setns into ${name} failed (errno ${koffi.errno()})`);
    try {
      return fn();
    } finally {
      if (setns(home, CLONE_NEWNET) !== 0) throw new HeraldError('HERALD_INTERNAL', `setns back from ${name} failed (errno ${koffi.errno()})`);
    }
  } finally {
    closeSync(target);
    closeSync(home);
  }
}
