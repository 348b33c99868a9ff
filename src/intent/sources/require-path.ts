/**
 * `--manifests PATH` checked once at agent start: a path that does not exist,
 * or that holds no manifest object, is a typo or a wrong mount, and an agent
 * running with no intent looks like success. Invalid manifests are not
 * refused here: they are reported by the file source like any later edit.
 */
import { stat } from 'node:fs/promises';
import { HeraldError } from '../../core/errors.js';
import { manifestLimitDefaults, type ManifestLimits } from '../limits.js';
import { loadManifestPath, MANIFEST_EXTENSIONS } from '../load.js';

export async function requireManifestPath(path: string, limits: ManifestLimits = manifestLimitDefaults): Promise<void> {
  try {
    await stat(path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? String(e);
    throw new HeraldError('HERALD_BAD_ARGUMENT', `--manifests ${path}: ${code === 'ENOENT' ? 'no such file or directory' : `cannot read (${code})`}`);
  }
  const load = await loadManifestPath(path, limits);
  if (load.files.length === 0) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `--manifests ${path}: no manifest file in it (${MANIFEST_EXTENSIONS.join(', ')})`);
  }
  const s = load.snapshot;
  if (s && load.errors.length === 0 && s.services.size + s.pools.size + s.policies.size + s.nodes.size + s.endpointSlices.size + s.bgpClusterConfigs.size + s.bgpPeerConfigs.size + s.bgpAdvertisements.size + s.bgpNodeOverrides.size === 0) {
    throw new HeraldError('HERALD_BAD_ARGUMENT', `--manifests ${path}: ${load.files.length} file(s) read, no manifest object in them`);
  }
}
