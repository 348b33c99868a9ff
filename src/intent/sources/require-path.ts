/**
 * `--manifests PATH` checked at agent start: a path that does not exist, or
 * that holds no manifest object, is a typo or a wrong mount, and an agent
 * running with no intent looks like success. Invalid manifests are not
 * refused here: they are reported by the file source like any later edit.
 *
 * The agent checks in two steps so that the manifests are parsed once:
 * `requireManifestFiles` before anything starts (the path exists and holds
 * manifest files: a directory walk, nothing parsed), then
 * `requireManifestObjects` on the file source's first snapshot, before that
 * snapshot is applied. `requireManifestPath` does both on its own.
 */
import { stat } from 'node:fs/promises';
import { HeraldError } from '../../core/errors.js';
import { manifestLimitDefaults, type ManifestLimits } from '../limits.js';
import { loadManifestPath, MANIFEST_EXTENSIONS } from '../load.js';
import type { IntentSnapshot } from '../snapshot.js';
import { scanManifestPath } from './files.js';

/** The path exists and holds at least one manifest file; resolves to how many. */
export async function requireManifestFiles(path: string, limits: ManifestLimits = manifestLimitDefaults): Promise<number> {
  try {
    await stat(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? String(e);
    throw new HeraldError('HERALD_BAD_ARGUMENT', `--manifests ${path}: ${code === 'ENOENT' ? 'no such file or directory' : `cannot read (${code})`}`);
  }
  // Files over the size cap or unreadable count: the source reports them.
  const { found } = await scanManifestPath(path, limits);
  if (found.length === 0) throw new HeraldError('HERALD_BAD_ARGUMENT', `--manifests ${path}: no manifest file in it (${MANIFEST_EXTENSIONS.join(', ')})`);
  return found.length;
}

/** A valid snapshot with no object at all, read from `files` file(s), is refused. */
export function requireManifestObjects(path: string, files: number, s: IntentSnapshot): void {
  if (s.services.size + s.pools.size + s.policies.size + s.nodes.size + s.endpointSlices.size + s.bgpClusterConfigs.size + s.bgpPeerConfigs.size + s.bgpAdvertisements.size + s.bgpNodeOverrides.size === 0) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `--manifests ${path}: ${files} file(s) read, no manifest object in them`);
  }
}

export async function requireManifestPath(path: string, limits: ManifestLimits = manifestLimitDefaults): Promise<void> {
  await requireManifestFiles(path, limits);
  const load = await loadManifestPath(path, limits);
  if (load.snapshot && load.errors.length === 0) requireManifestObjects(path, load.files.length, load.snapshot);
}
